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
use super::index::{IndexSnapshot, Loc, INDEX_FILE};
use super::pack::{PackHeader, PackId, PACK_HEADER_LEN};
use super::scan::{scan_pack, Scan};
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

/// Inserts a found entry, keeping an existing one unless the new one is
/// top-level and the existing one only a chunk.
fn insert_found(index: &mut HashMap<BlobHash, Loc>, hash: BlobHash, loc: Loc) {
    match index.get(&hash) {
        Some(old) if old.kind.is_top_level() || !loc.kind.is_top_level() => {}
        _ => {
            index.insert(hash, loc);
        }
    }
}

fn add_scan(
    index: &mut HashMap<BlobHash, Loc>,
    lists: &mut Vec<(BlobHash, Loc, Vec<u8>)>,
    id: PackId,
    scan: Scan,
) {
    for e in scan.entries {
        let loc = Loc {
            pack: id,
            offset: e.offset,
            stored_len: e.header.stored_len,
            raw_len: e.header.raw_len,
            kind: e.header.kind,
            flags: e.header.flags,
        };
        insert_found(index, e.header.hash, loc);
        if let Some(p) = e.list_payload {
            lists.push((e.header.hash, loc, p));
        }
    }
}

/// Drops chunk lists (found in scanned tails) whose chunks are not all
/// stored: after a crash the list may have reached the disk without one of
/// its chunks. Such a list was never synced, so no one refers to it, and
/// keeping it would make a later put of the same blob dedup against it.
fn drop_incomplete_lists(index: &mut HashMap<BlobHash, Loc>, lists: Vec<(BlobHash, Loc, Vec<u8>)>) {
    for (hash, loc, payload) in lists {
        if index.get(&hash) != Some(&loc) {
            continue;
        }
        let complete = decode_chunk_list(&payload, loc.raw_len)
            .map(|refs| refs.iter().all(|r| index.contains_key(&r.hash)))
            .unwrap_or(false);
        if !complete {
            index.remove(&hash);
        }
    }
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
    let mut dir_changed = false;
    let mut pack_ids = Vec::new();
    for name in &names {
        if name.ends_with(TMP_SUFFIX) {
            if !read_only {
                let p = dir.join(name);
                vfs.remove_file(&p)
                    .map_err(io_err("remove temporary file", &p))?;
                dir_changed = true;
            }
        } else if let Some(id) = PackId::parse_file_name(name) {
            pack_ids.push(id);
        }
    }
    pack_ids.sort();
    let mode = if read_only {
        OpenMode::Read
    } else {
        OpenMode::ReadWrite
    };

    // Open every pack and read its header.
    let mut found = Vec::new();
    let mut next_id = 1u32;
    for id in pack_ids {
        next_id = next_id.max(id.0.saturating_add(1));
        let path = dir.join(id.file_name());
        let file = match vfs.open(&path, mode) {
            Ok(f) => f,
            // A reader races the writer's gc, which may delete a pack
            // between the listing and the open: its blobs are elsewhere.
            Err(e) if read_only && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(EngineError::io("open pack", &path, e)),
        };
        let len = file.len().map_err(io_err("size pack", &path))?;
        if len < PACK_HEADER_LEN as u64 {
            // A pack whose creation a crash cut short: nothing in it was
            // ever synced (a sync covers the header too).
            if !read_only {
                drop(file);
                vfs.remove_file(&path)
                    .map_err(io_err("remove torn pack", &path))?;
                dir_changed = true;
            }
            continue;
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
        found.push(Found {
            id,
            path,
            file,
            len,
            header,
        });
    }
    if dir_changed {
        vfs.sync_dir(dir)
            .map_err(io_err("fsync blob directory", dir))?;
    }

    // The persisted snapshot, if it is intact and matches the packs.
    let index_path = dir.join(INDEX_FILE);
    let snapshot = if vfs.exists(&index_path) {
        read_snapshot(vfs.as_ref(), &index_path)
            .ok()
            .filter(|s| snapshot_matches(s, &found))
    } else {
        None
    };
    let rebuilt = snapshot.is_none();

    let mut index: HashMap<BlobHash, Loc> = HashMap::new();
    let mut covered: HashMap<PackId, u64> = HashMap::new();
    if let Some(s) = snapshot {
        index.reserve(s.entries.len());
        for p in &s.packs {
            covered.insert(p.id, p.covered_len);
        }
        for (h, l) in s.entries {
            index.insert(h, l);
        }
    }

    // Scan what the snapshot does not cover.
    let mut lists = Vec::new();
    let mut recovered = false;
    let mut scanned = HashMap::new();
    let mut packs = BTreeMap::new();
    let mut dirty = Vec::new();
    for f in found {
        let from = covered
            .get(&f.id)
            .copied()
            .unwrap_or(PACK_HEADER_LEN as u64);
        let scan = scan_pack(f.file.as_ref(), from, f.len).map_err(io_err("scan pack", &f.path))?;
        let mut end = f.len;
        if let Some(torn) = scan.torn_at {
            if !read_only {
                f.file
                    .set_len(torn)
                    .map_err(io_err("truncate torn pack tail", &f.path))?;
                f.file.sync_data().map_err(io_err("fsync pack", &f.path))?;
            }
            end = torn;
        }
        if !scan.entries.is_empty() {
            recovered = true;
        }
        add_scan(&mut index, &mut lists, f.id, scan);
        scanned.insert(f.id, end);
        let pack = Arc::new(PackFile {
            id: f.id,
            path: f.path,
            nonce: f.header.map(|h| h.nonce).unwrap_or(0),
            file: f.file,
        });
        if from < end {
            dirty.push(pack.clone());
        }
        packs.insert(f.id, (pack, end, f.header.is_some()));
    }
    drop_incomplete_lists(&mut index, lists);

    // Keep appending to the newest pack if it has room.
    let active = packs
        .values()
        .next_back()
        .filter(|(_, len, header_ok)| *header_ok && *len < opts.pack_size_bytes)
        .map(|(p, len, _)| Active {
            pack: p.clone(),
            len: *len,
        });
    let store = BlobStore {
        vfs,
        dir: dir.to_path_buf(),
        opts,
        read_only,
        index: RwLock::new(index),
        packs: RwLock::new(packs.into_iter().map(|(id, (p, _, _))| (id, p)).collect()),
        writer: Mutex::new(Writer {
            active,
            next_id,
            dirty,
            dir_dirty: false,
            since_snapshot: 0,
            poisoned: None,
        }),
        write_seq: AtomicU64::new(0),
        synced_seq: AtomicU64::new(0),
        sync_lock: Mutex::new(()),
        gc_gate: RwLock::new(()),
        scanned: Mutex::new(scanned),
        dicts,
    };
    if !read_only && (rebuilt || recovered) {
        store.persist_index()?;
    }
    Ok(store)
}

fn read_snapshot(vfs: &dyn Vfs, path: &Path) -> Result<IndexSnapshot> {
    let f = vfs
        .open(path, OpenMode::Read)
        .map_err(io_err("open index", path))?;
    let len = f.len().map_err(io_err("size index", path))?;
    let mut b = vec![
        0u8;
        usize::try_from(len).map_err(|_| EngineError::TooLarge {
            what: format!("blob index {} of {len} bytes", path.display()),
        })?
    ];
    f.read_exact_at(&mut b, 0)
        .map_err(io_err("read index", path))?;
    Ok(IndexSnapshot::decode(&b)?)
}

/// A snapshot is usable only if every pack it lists is still there, is the
/// same file (nonce), and is at least as long as the part it covers.
fn snapshot_matches(s: &IndexSnapshot, found: &[Found]) -> bool {
    s.packs.iter().all(|c| {
        found.iter().any(|f| {
            f.id == c.id && f.header.is_some_and(|h| h.nonce == c.nonce) && f.len >= c.covered_len
        })
    })
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
        add_scan(&mut index, &mut lists, id, scan);
    }
    drop_incomplete_lists(&mut index, lists);
    Ok(())
}
