//! Restoring a store from an archive, and listing the archives under a
//! prefix.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cairn_codec::frame;
use cairn_codec::segment::SEGMENT_HEADER_LEN;
use cairn_codec::{ChainHash, Lsn};
use cairn_engine::store_dir::STORE_DIR_NAME;
use cairn_query::point::Point;

use super::archive::Archive;
use super::manifest::Manifest;
use super::{manifests, object_name, parse_manifest_name, read_manifest, ReplicateError};

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreReport {
    /// The store directory created (`DIR/.cairn`).
    pub store: PathBuf,
    /// The manifest restored from.
    pub manifest: String,
    /// Its generation.
    pub generation: String,
    /// The head of the restored store: the manifest's, or the point's.
    pub head_lsn: u64,
    /// The chain value after it, 64 hex digits.
    pub head_chain: String,
    /// Files written.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Objects read.
    pub objects: u64,
}

/// Restores the store `dir/.cairn` (for the workspace `dir`) from
/// `archive`: from its newest manifest, or, with `at`, cut back to that
/// point (the manifest restored is the first of the newest generation
/// whose head is at or after an LSN point, else the newest). Every piece
/// is checked against its name (blake3) and length as it is read; the
/// files are written to `dir/.cairn.restoring` and moved into place only
/// when all are there; then the store is opened, its head compared with
/// the manifest's (LSN and chain hash), and verified. A store that
/// already exists is refused.
pub fn restore(
    archive: &Archive,
    dir: &Path,
    at: Option<Point>,
) -> Result<RestoreReport, ReplicateError> {
    let store = dir.join(STORE_DIR_NAME);
    if store.exists() {
        return Err(ReplicateError::Local {
            path: store,
            detail: "a store is already there; restore into a directory without one".into(),
        });
    }
    let name = choose_manifest(archive, at)?;
    let manifest = read_manifest(archive, &name)?;
    let mut report = RestoreReport {
        store: store.clone(),
        manifest: name.clone(),
        generation: manifest.generation.clone(),
        head_lsn: manifest.head_lsn,
        head_chain: manifest.head_chain.clone(),
        files: 0,
        bytes: 0,
        objects: 0,
    };
    write_store(archive, &manifest, dir, &store, &mut report)?;
    let mut expected = (
        Lsn(manifest.head_lsn),
        ChainHash::from_hex(&manifest.head_chain).map_err(|e| ReplicateError::Damaged {
            object: name.clone(),
            detail: format!("head chain: {e}"),
        })?,
    );
    if let Some(point) = at {
        let s = open_restored(dir, &store)?;
        let lsn = s.query(|q| q.resolve(point))?;
        s.close()?;
        if lsn.0 < expected.0 .0 {
            expected = cut_log(&store.join("log"), lsn)?;
            forget_derived(&store)?;
        }
    }
    check_restored(dir, &store, expected)?;
    report.head_lsn = expected.0 .0;
    report.head_chain = expected.1.to_hex();
    Ok(report)
}

/// The name of the manifest to restore from `archive`: in the newest
/// generation, the first whose head is at or after the LSN point `at`,
/// else the newest.
fn choose_manifest(archive: &Archive, at: Option<Point>) -> Result<String, ReplicateError> {
    let all = manifests(archive)?;
    let Some((gen, _, _)) = all.last() else {
        return Err(ReplicateError::Empty {
            url: archive.url().to_string(),
        });
    };
    let gen = gen.clone();
    let of_gen: Vec<&(String, u64, String)> = all.iter().filter(|(g, _, _)| *g == gen).collect();
    let chosen = match at {
        Some(Point::Lsn(n)) => of_gen
            .iter()
            .find(|(_, lsn, _)| *lsn >= n.0)
            .or(of_gen.last()),
        _ => of_gen.last(),
    };
    match chosen {
        Some((_, _, name)) => Ok(name.clone()),
        None => Err(ReplicateError::Empty {
            url: archive.url().to_string(),
        }),
    }
}

/// Writes the files of `manifest` to `dir/.cairn.restoring` (left over
/// from an unfinished restore, it is removed first) and moves them into
/// place as `store` once all are there.
fn write_store(
    archive: &Archive,
    manifest: &Manifest,
    dir: &Path,
    store: &Path,
    report: &mut RestoreReport,
) -> Result<(), ReplicateError> {
    std::fs::create_dir_all(dir).map_err(|e| ReplicateError::io("create", dir, e))?;
    let staging = dir.join(format!("{STORE_DIR_NAME}.restoring"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)
            .map_err(|e| ReplicateError::io("remove the unfinished restore", &staging, e))?;
    }
    write_files(archive, manifest, &staging, report)?;
    std::fs::rename(&staging, store)
        .map_err(|e| ReplicateError::io("move into place", store, e))?;
    sync_dir(dir)
}

/// Opens the restored `store` for the workspace `dir`.
fn open_restored(dir: &Path, store: &Path) -> crate::Result<crate::Store> {
    crate::Store::builder()
        .workspace(dir)
        .store_dir(store)
        .open()
}

/// Checks that the restored `store` ends at the `expected` LSN and chain
/// hash and passes verify.
fn check_restored(
    dir: &Path,
    store: &Path,
    expected: (Lsn, ChainHash),
) -> Result<(), ReplicateError> {
    let s = open_restored(dir, store)?;
    let head = s.head();
    if (head.last_lsn, head.chain) != expected {
        return Err(ReplicateError::Local {
            path: store.to_path_buf(),
            detail: format!(
                "restored head is LSN {} ({}), the archive's is LSN {} ({}): the archive is damaged",
                head.last_lsn.0,
                head.chain.to_hex(),
                expected.0 .0,
                expected.1.to_hex()
            ),
        });
    }
    let v = s.verify(Some(expected.1))?;
    if !v.is_ok() {
        return Err(ReplicateError::Local {
            path: store.to_path_buf(),
            detail: format!(
                "the restored store fails verify ({} log problems, {} blob problems): run `cairn --store {} verify` for details",
                v.log.problems.len(),
                v.blobs.problems.len(),
                store.display()
            ),
        });
    }
    s.close()?;
    Ok(())
}

/// Writes every file of `m` under `root`, each piece checked.
fn write_files(
    archive: &Archive,
    m: &Manifest,
    root: &Path,
    report: &mut RestoreReport,
) -> Result<(), ReplicateError> {
    let has_index = m
        .files
        .iter()
        .any(|f| f.path.starts_with(super::SEG_INDEX_DIR));
    let index_dirs: &[&str] = if has_index {
        &[super::SEG_INDEX_DIR, "index"]
    } else {
        &[]
    };
    for sub in ["", "log", "blobs"].iter().chain(index_dirs) {
        let d = root.join(sub);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&d)
            .map_err(|e| ReplicateError::io("create", &d, e))?;
    }
    // The tail's state, when it describes the tail restored: the first
    // open then takes the tail's end from it instead of walking it.
    if let Some(bytes) = tail_state_of(m) {
        let path = root.join("log").join(cairn_engine::log::TAIL_STATE_FILE);
        let mut f = create(&path)?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| ReplicateError::io("write", &path, e))?;
        report.files += 1;
        report.bytes += bytes.len() as u64;
    }
    // Every piece of every file, in order, read several at a time; a file
    // is created at its first piece and synced after its last. The parts
    // of the tail's query index (version 5) are no store files: the store
    // builds its own.
    let mut order = Vec::new();
    let parts: Vec<&str> = m
        .tail_index_parts()
        .into_iter()
        .map(|f| f.path.as_str())
        .collect();
    for (fi, f) in m.files.iter().enumerate() {
        if parts.contains(&f.path.as_str()) {
            continue;
        }
        if f.pieces.is_empty() {
            create(&root.join(&f.path))?
                .sync_all()
                .map_err(|e| ReplicateError::io("sync", &root.join(&f.path), e))?;
            report.files += 1;
        }
        order.extend((0..f.pieces.len()).map(|pi| (fi, pi)));
    }
    let names: Vec<String> = order
        .iter()
        .map(|&(fi, pi)| object_name(&m.files[fi].pieces[pi].hash))
        .collect();
    let mut out: Option<(PathBuf, File)> = None;
    archive.get_each(&names, |i, got| {
        let (fi, pi) = order[i];
        let f = &m.files[fi];
        let p = &f.pieces[pi];
        let obj = names[i].clone();
        let what = format!("piece {} of {} of {}", pi + 1, f.pieces.len(), f.path);
        let bytes = got.ok_or_else(|| ReplicateError::Damaged {
            object: obj.clone(),
            detail: format!("missing ({what})"),
        })?;
        check_piece(&obj, &bytes, p, &what)?;
        if pi == 0 {
            let path = root.join(&f.path);
            out = Some((path.clone(), create(&path)?));
        }
        let Some((path, file)) = out.as_mut() else {
            return Err(ReplicateError::Local {
                path: root.join(&f.path),
                detail: "a piece arrived before its file was created".into(),
            });
        };
        file.write_all(&bytes)
            .map_err(|e| ReplicateError::io("write", path, e))?;
        report.objects += 1;
        if pi + 1 == f.pieces.len() {
            file.sync_all()
                .map_err(|e| ReplicateError::io("sync", path, e))?;
            report.files += 1;
            report.bytes += f.len;
            out = None;
        }
        Ok(())
    })?;
    for sub in index_dirs.iter().chain(&["log", "blobs", ""]) {
        sync_dir(&root.join(sub))?;
    }
    Ok(())
}

/// The bytes of `m`'s `tail_state` when they are an intact state of the
/// tail `m` names as restored: the last segment's first LSN, its length
/// in `files`, and the manifest's head (LSN and chain value) as its last
/// record. Else `None`, and the restored store's first open walks the
/// tail: a state claiming records past the tail would make that open
/// refuse the tail as damaged. What the state says of the file's frames
/// (the last frame's offset, the sparse index) is checked by the
/// engine's open, which trusts the state only when it matches the file
/// exactly, and each frame's CRC when it is read.
fn tail_state_of(m: &Manifest) -> Option<Vec<u8>> {
    let bytes = m.tail_state_bytes()?;
    let st = cairn_engine::log::TailState::decode(&bytes)?;
    let first = m.tail_first_lsn()?;
    let seg = m
        .files
        .iter()
        .find(|f| f.path == format!("log/{first:020}.seg"))?;
    let fits = st.first_lsn.0 == first
        && st.valid_len == seg.len
        && st.last_lsn.0 == m.head_lsn
        && st.chain.to_hex() == m.head_chain;
    fits.then_some(bytes)
}

/// Creates the new file `path` (owner-only), failing if it exists.
fn create(path: &Path) -> Result<File, ReplicateError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ReplicateError::io("create", path, e))
}

/// Checks that `bytes`, read from the object `obj`, are the piece `p`:
/// its length and its blake3.
fn check_piece(
    obj: &str,
    bytes: &[u8],
    p: &super::manifest::Piece,
    what: &str,
) -> Result<(), ReplicateError> {
    if bytes.len() as u64 != p.len {
        return Err(ReplicateError::Damaged {
            object: obj.to_string(),
            detail: format!(
                "{} bytes, the manifest says {} ({what})",
                bytes.len(),
                p.len
            ),
        });
    }
    let got = blake3::hash(bytes).to_hex();
    if got.as_str() != p.hash {
        return Err(ReplicateError::Damaged {
            object: obj.to_string(),
            detail: format!("its contents hash to {got}, not to its name ({what})"),
        });
    }
    Ok(())
}

/// Cuts the log in `log` after the record `lsn`, at the end of the atomic
/// batch before it when `lsn` is inside one: later segments are removed,
/// the one holding it is cut (it becomes the tail). Returns the new head.
fn cut_log(log: &Path, lsn: Lsn) -> Result<(Lsn, ChainHash), ReplicateError> {
    let mut segs: Vec<(u64, PathBuf)> = std::fs::read_dir(log)
        .map_err(|e| ReplicateError::io("list", log, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let first = name.strip_suffix(".seg")?.parse().ok()?;
            Some((first, e.path()))
        })
        .collect();
    segs.sort();
    let mut head = (Lsn(0), ChainHash::ZERO);
    for (first, path) in segs {
        if first > lsn.0 && first > 1 {
            std::fs::remove_file(&path).map_err(|e| ReplicateError::io("remove", &path, e))?;
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| ReplicateError::io("read", &path, e))?;
        let h = cairn_codec::segment::SegmentHeader::decode(&bytes).map_err(|e| {
            ReplicateError::Local {
                path: path.clone(),
                detail: format!("segment header: {e}"),
            }
        })?;
        head = (Lsn(first.saturating_sub(1)), h.prev_chain);
        let (mut off, mut cut, mut beyond) = (SEGMENT_HEADER_LEN, SEGMENT_HEADER_LEN, false);
        while off < bytes.len() {
            let Ok(fr) = frame::decode(&bytes[off..]) else {
                break;
            };
            if fr.lsn > lsn {
                beyond = true;
                break;
            }
            off += fr.len();
            if !fr.batch_continues() {
                cut = off;
                head = (fr.lsn, fr.chain);
            }
        }
        // A segment that ends before the point is kept whole (footer
        // and all); the one holding it is cut after the point's batch.
        if beyond {
            let f = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| ReplicateError::io("open", &path, e))?;
            f.set_len(cut as u64)
                .map_err(|e| ReplicateError::io("cut", &path, e))?;
            f.sync_all()
                .map_err(|e| ReplicateError::io("sync", &path, e))?;
        }
    }
    sync_dir(log)?;
    Ok(head)
}

/// Removes what the open that resolved the point derived from the
/// uncut log: `tail.state` and the sparse indexes certify records the cut
/// removed (an open would take the cut for damage), and the query index
/// and caches describe them. All are rebuilt by the next open.
fn forget_derived(store: &Path) -> Result<(), ReplicateError> {
    let log = store.join("log");
    for e in std::fs::read_dir(&log).map_err(|e| ReplicateError::io("list", &log, e))? {
        let p = e.map_err(|e| ReplicateError::io("list", &log, e))?.path();
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if name == "tail.state" || name.ends_with(".idx") {
            std::fs::remove_file(&p).map_err(|e| ReplicateError::io("remove", &p, e))?;
        }
    }
    for sub in ["index", "snapshot"] {
        let d = store.join(sub);
        match std::fs::remove_dir_all(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ReplicateError::io("remove", &d, e)),
        }
    }
    sync_dir(&log)?;
    sync_dir(store)
}

fn sync_dir(dir: &Path) -> Result<(), ReplicateError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| ReplicateError::io("sync", dir, e))
}

/// One archive found under a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// Its place under the prefix listed ("" for the prefix itself).
    pub prefix: String,
    /// Its newest generation.
    pub generation: String,
    /// The workspace of the store replicated there, when known.
    pub workspace: Option<String>,
    /// Sessions in the store at its newest head, when counted.
    pub sessions: Option<u64>,
    /// The newest head shipped.
    pub head_lsn: u64,
    /// Bytes of the store at that head.
    pub bytes: u64,
    /// When that manifest was written, milliseconds since the epoch.
    pub last_upload_ms: i64,
}

/// Every archive under `archive`'s prefix (each folder holding
/// `manifests/`), with its newest manifest's summary, sorted by prefix.
pub fn list_archives(archive: &Archive) -> Result<Vec<ArchiveSummary>, ReplicateError> {
    let mut newest: std::collections::BTreeMap<String, (String, u64, String)> = Default::default();
    for l in archive.list("")? {
        let (prefix, rest) = match l.name.rfind("/manifests/") {
            Some(i) if !l.name.starts_with("manifests/") => {
                (l.name[..i].to_string(), &l.name[i + 1..])
            }
            _ => (String::new(), l.name.as_str()),
        };
        let Some((g, lsn)) = parse_manifest_name(rest) else {
            continue;
        };
        let key = (g.to_string(), lsn, l.name.clone());
        let e = newest.entry(prefix).or_insert_with(|| key.clone());
        if (&key.0, key.1) > (&e.0, e.1) {
            *e = key;
        }
    }
    let mut out = Vec::new();
    for (prefix, (_, _, name)) in newest {
        let m = read_manifest(archive, &name)?;
        out.push(ArchiveSummary {
            prefix,
            generation: m.generation.clone(),
            workspace: m.workspace.clone(),
            sessions: m.sessions,
            head_lsn: m.head_lsn,
            bytes: m.bytes(),
            last_upload_ms: m.created_ms,
        });
    }
    Ok(out)
}

/// What [`prune`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Manifests of older generations.
    pub manifests: u64,
    /// Objects no remaining manifest names.
    pub objects: u64,
}

/// Deletes from `archive` the manifests of every generation but the
/// newest, then the objects no remaining manifest names (pieces of files
/// the store has since dropped, e.g. packs its gc rewrote, stay while a
/// manifest of the newest generation names them: each is a point a
/// restore can go back to). Manifests go first, so no manifest is left
/// naming a deleted object. Only asked for: `cairn replicate --prune`.
/// Run it where no other replicator writes to the same archive (an object
/// sent but not yet named by a manifest would be deleted, and sent again).
pub fn prune(archive: &Archive) -> Result<PruneReport, ReplicateError> {
    let all = manifests(archive)?;
    let Some((newest, _, _)) = all.last() else {
        return Ok(PruneReport::default());
    };
    let newest = newest.clone();
    let mut report = PruneReport::default();
    let mut named = std::collections::HashSet::new();
    for (g, _, name) in &all {
        if *g == newest {
            let m = read_manifest(archive, name)?;
            // The tail's query index (version 4; version 5 lists its
            // parts in `files`) is named as well.
            for f in m.files.into_iter().chain(m.tail_index) {
                named.extend(f.pieces.into_iter().map(|p| p.hash));
            }
        } else {
            archive.delete(name)?;
            report.manifests += 1;
        }
    }
    for l in archive.list(super::OBJECTS_DIR)? {
        let Some(hash) = l.name.strip_prefix("objects/") else {
            continue;
        };
        if !named.contains(hash) {
            archive.delete(&l.name)?;
            report.objects += 1;
        }
    }
    Ok(report)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::replicate::{newest_manifest, Archive, Replicator};
    use cairn_engine::log::TailState;

    /// The canonical export of the store of `ws`.
    fn export_of(ws: &Path) -> Vec<u8> {
        let s = crate::Store::builder()
            .workspace(ws)
            .read_only()
            .open()
            .unwrap();
        let mut out = Vec::new();
        s.export(&crate::Filter::all(), crate::Format::Jsonl, &mut out)
            .unwrap();
        out
    }

    /// The sparse index entries of the `tail.state` of the store `ws`.
    fn state_entries(ws: &Path) -> Vec<(Lsn, u64)> {
        let b = std::fs::read(ws.join(".cairn/log/tail.state")).unwrap();
        TailState::decode(&b).unwrap().index_entries().to_vec()
    }

    /// A restore writes the manifest's `tail_state` as the restored
    /// store's `log/tail.state` when it describes the tail restored, so
    /// the store's first open (restore's own check) takes the tail's end
    /// and sparse index from it instead of walking the tail: the close
    /// after that open writes back the state's entries (one every 64 KiB),
    /// where a walk indexes the tail every 4 KiB. A state that does not
    /// match the tail (its last frame's offset wrong) is written but not
    /// trusted by the open, which walks the tail; one that claims records
    /// past the tail is not written (the open would refuse the tail as
    /// damaged). A restore `--at` a point inside the tail cuts it and
    /// drops the state. Every restored store's export is the original's.
    #[test]
    fn a_restore_takes_the_shipped_tail_state_only_when_it_fits() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let s = crate::Store::open(&ws).unwrap();
        for b in 0..40u64 {
            let batch: Vec<crate::Event> = (0..100u64)
                .map(|i| {
                    let mut e = crate::Event::new(crate::EventKind::Prompt, "s");
                    let n = b * 100 + i;
                    e.text = Some(
                        (0..4u64)
                            .map(|j| blake3::hash(&[n, j].map(u64::to_le_bytes).concat()))
                            .map(|h| h.to_hex().to_string())
                            .collect(),
                    );
                    e
                })
                .collect();
            s.append_batch(&batch).unwrap();
        }
        s.close().unwrap();
        let arch = d.path().join("archive");
        let url = format!("file://{}", arch.display());
        let a = Archive::open(&url).unwrap();
        Replicator::new(Archive::open(&url).unwrap(), ws.join(".cairn"))
            .unwrap()
            .round()
            .unwrap();
        let (name, m) = newest_manifest(&a, None).unwrap().unwrap();
        let name = name.to_string();
        let shipped = TailState::decode(&m.tail_state_bytes().unwrap()).unwrap();
        assert!(
            shipped.index_entries().len() >= 4,
            "{:?}",
            shipped.index_entries()
        );
        let want = export_of(&ws);

        let back = d.path().join("back");
        restore(&a, &back, None).unwrap();
        let took = |ws: &Path| state_entries(ws) == shipped.index_entries();
        assert!(took(&back), "restore's open walked the tail");
        assert_eq!(export_of(&back), want);
        // Opened again: still the shipped state's entries, no walk.
        crate::Store::open(&back).unwrap().close().unwrap();
        assert!(took(&back), "the next open walked the tail");

        // A state whose facts restore checks fit but whose last frame is
        // not where it says: the open does not trust it and walks.
        let off = TailState::new(
            shipped.first_lsn,
            shipped.valid_len,
            Some((shipped.last_lsn, shipped.last_frame_off - 1)),
            shipped.chain,
            shipped.index_entries().to_vec(),
        );
        // One that claims a record past the tail.
        let past = TailState::new(
            shipped.first_lsn,
            shipped.valid_len + 100,
            Some((shipped.last_lsn.next(), shipped.valid_len)),
            shipped.chain,
            shipped.index_entries().to_vec(),
        );
        for (what, st) in [("a wrong offset", off), ("records past the tail", past)] {
            let mut altered = m.clone();
            altered.set_tail_state(Some(&st.encode()));
            std::fs::write(arch.join(&name), altered.encode()).unwrap();
            let to = d.path().join(format!("back {what}"));
            restore(&a, &to, None).unwrap();
            let walked = state_entries(&to);
            assert!(
                walked.len() > shipped.index_entries().len(),
                "{what}: {} entries, the shipped state has {}",
                walked.len(),
                shipped.index_entries().len()
            );
            assert_eq!(export_of(&to), want, "{what}");
        }
        std::fs::write(arch.join(&name), m.encode()).unwrap();

        // A point inside the tail: the tail is cut, the state dropped.
        let at = d.path().join("at");
        let r = restore(&a, &at, Some(Point::Lsn(Lsn(2000)))).unwrap();
        assert_eq!(r.head_lsn, 2000);
        let cut =
            TailState::decode(&std::fs::read(at.join(".cairn/log/tail.state")).unwrap()).unwrap();
        assert_eq!(cut.last_lsn, Lsn(2000));
    }
}
