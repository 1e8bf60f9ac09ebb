//! The checkpoint list cache: a fold of the log's `checkpoint.create` and
//! `checkpoint.discard` records, kept in memory and in a file of the
//! workspace's cache directory, so listing checkpoints folds only the
//! records appended since. Below the workspace: it knows only its file's
//! path.

use std::path::PathBuf;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use cairn_codec::{ChainHash, EventKind, Lsn};
use cairn_engine::log::Record;

use crate::checkpoint::{session_or_default, CheckpointInfo};
use crate::durable::write_atomic;
use crate::error::{Result, SnapshotError};
use crate::log_access::LogAccess;
use crate::retention;

/// The persisted checkpoint list: a fold of the log up to `folded_to`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ListCache {
    version: u32,
    folded_to: Lsn,
    chain_at: ChainHash,
    list: Vec<CheckpointInfo>,
}

/// Version 2: [`CheckpointInfo::not_captured`]; version 3:
/// [`CheckpointInfo::discarded_at`] and
/// [`CheckpointInfo::discarded_by_retention`]; version 4:
/// [`CheckpointInfo::agent`] and [`CheckpointInfo::model`].
const LIST_CACHE_VERSION: u32 = 4;

/// Records folded into the in-memory checkpoint list before the file copy
/// is rewritten: a process that starts from a file this far behind folds at
/// most this many records (microseconds each) more.
const LIST_CACHE_SAVE_RECORDS: u64 = 256;

fn fold(cache: &mut ListCache, r: &Record) {
    match r.event.kind {
        EventKind::CheckpointCreate => {
            if let Some(i) = CheckpointInfo::from_record(r.lsn, &r.event) {
                cache.list.push(i);
            }
        }
        EventKind::CheckpointDiscard => {
            if let Some(id) = r.event.checkpoint {
                if let Ok(i) = cache.list.binary_search_by_key(&id, |c| c.id) {
                    let c = &mut cache.list[i];
                    if !c.discarded {
                        c.discarded = true;
                        c.discarded_at = Some(r.lsn);
                        c.discarded_by_retention = retention::discarded_by_retention(&r.event);
                    }
                }
            }
        }
        _ => {}
    }
}

/// The checkpoint list file of one workspace, with the copy this process
/// last folded and how far the file copy is folded.
#[derive(Debug)]
pub(crate) struct ListCacheFile {
    path: PathBuf,
    read_only: bool,
    slot: Mutex<Option<(ListCache, Lsn)>>,
}

impl ListCacheFile {
    /// The list file at `path`; `read_only`: never written.
    pub(crate) fn new(path: PathBuf, read_only: bool) -> ListCacheFile {
        ListCacheFile {
            path,
            read_only,
            slot: Mutex::new(None),
        }
    }

    fn save(&self, cache: &ListCache) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let bytes = rmp_serde::to_vec(cache)
            .map_err(|e| SnapshotError::Invalid(format!("encode checkpoint list: {e}")))?;
        // A cache: rebuilt from the log when lost, so no fsync.
        write_atomic(&self.path, &bytes, false)
    }

    /// Writes the file if the in-memory copy has folded records the file
    /// lacks (best effort: it is a cache).
    pub(crate) fn save_if_behind(&self) {
        if let Some((cache, saved_to)) = self.slot.lock().as_ref() {
            if cache.folded_to != *saved_to {
                let _ = self.save(cache);
            }
        }
    }

    /// Every checkpoint (of `session`, if given), oldest first, discarded
    /// ones included and marked: the copy in memory or the file, with the
    /// records appended since folded in (rebuilt from the log if the file
    /// is missing or belongs to another log).
    pub(crate) fn list<L: LogAccess + ?Sized>(
        &self,
        log: &L,
        session: Option<&str>,
    ) -> Result<Vec<CheckpointInfo>> {
        let mut slot = self.slot.lock();
        let (mut cache, mut saved_to) = match slot.take() {
            Some(c) => c,
            None => {
                let file = std::fs::read(&self.path)
                    .ok()
                    .and_then(|b| rmp_serde::from_slice::<ListCache>(&b).ok())
                    .filter(|c| c.version == LIST_CACHE_VERSION)
                    .unwrap_or_default();
                let saved_to = file.folded_to;
                (file, saved_to)
            }
        };
        let head = log.head();
        let stale = cache.folded_to > head.last_lsn
            || (cache.folded_to.0 > 0
                && log.read(cache.folded_to).map(|r| r.chain).ok() != Some(cache.chain_at));
        if stale {
            cache = ListCache::default();
        }
        if cache.folded_to < head.last_lsn {
            let mut last = (cache.folded_to, cache.chain_at);
            log.for_each_from(cache.folded_to.next(), &mut |r| {
                if r.lsn <= head.last_lsn {
                    fold(&mut cache, &r);
                    last = (r.lsn, r.chain);
                }
                Ok(())
            })?;
            cache.version = LIST_CACHE_VERSION;
            cache.folded_to = last.0;
            cache.chain_at = last.1;
            // The file saves the next process a fold of the whole log; a few
            // records more to fold cost it less than writing the file costs
            // every rollback, so a long-lived process writes it now and then
            // (and when the workspace is dropped).
            if stale || cache.folded_to.0 >= saved_to.0 + LIST_CACHE_SAVE_RECORDS {
                self.save(&cache)?;
                saved_to = cache.folded_to;
            }
        }
        let session = session.map(session_or_default);
        let list = cache
            .list
            .iter()
            .filter(|c| session.as_ref().is_none_or(|s| &c.session == s))
            .cloned()
            .collect();
        *slot = Some((cache, saved_to));
        Ok(list)
    }
}
