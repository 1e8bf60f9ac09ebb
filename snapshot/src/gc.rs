//! Applying a retention policy (`cairn gc`): the checkpoints it evicts
//! are recorded, then every blob that nothing kept names is collected,
//! and the caches forget what was collected.

use std::collections::{HashMap, HashSet};

use cairn_codec::{BlobHash, CheckpointId, Event, EventKind, Lsn};

use crate::blobs::{BlobAccess, GcMode, GcSummary};
use crate::checkpoint::CheckpointInfo;
use crate::error::Result;
use crate::interrupted::record_interrupted_rollback;
use crate::list::list_checkpoints;
use crate::log_access::LogAccess;
use crate::manifest;
use crate::retention::{self, BudgetOutcome, Candidate, RetentionPolicy};
use crate::workspace::Workspace;

/// What retention did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Checkpoints evicted now (each recorded by a `checkpoint.discard`).
    pub discarded: Vec<CheckpointId>,
    /// Checkpoints still retained.
    pub retained: usize,
    /// Blobs kept live.
    pub live_blobs: usize,
    /// What the blob collection removed.
    pub gc: GcSummary,
    /// Retained checkpoints (or rollback targets) whose tree could not be
    /// read whole, each with why. A tree whose root (or a node) is no
    /// manifest node at all names no other blob, so blobs are still
    /// collected; for any other failure what the tree names is unknown,
    /// and no blob is collected this time (see [`RetentionReport::collected`]).
    pub damaged: Vec<(CheckpointId, String)>,
    /// False when blob collection was skipped, because a tree it must keep
    /// could not be read (listed in [`RetentionReport::damaged`]).
    pub collected: bool,
    /// How the size budget stands after the evictions (with `max_bytes`
    /// only): see [`BudgetOutcome::met`].
    pub budget: Option<BudgetOutcome>,
    /// Checkpoints discarded before this run (by a recorded
    /// `checkpoint.discard`, or by a gc that stopped before collecting)
    /// whose tree this run collected.
    pub collected_discarded: Vec<CollectedDiscard>,
}

impl RetentionReport {
    /// With a `max_bytes` policy, how many bytes the blob store still takes
    /// on disk over the budget once collected (after rewriting what it
    /// could: what is left is referenced, or in packs kept as damaged).
    /// `None` without a budget, within it, or when nothing was collected.
    pub fn stored_over_budget(&self) -> Option<u64> {
        let max = self.budget.as_ref()?.max_bytes;
        (self.collected && self.gc.stored_bytes > max).then(|| self.gc.stored_bytes - max)
    }
}

/// A checkpoint discarded earlier whose contents a gc collected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectedDiscard {
    /// The checkpoint.
    pub id: CheckpointId,
    /// The LSN of the `checkpoint.discard` record.
    pub discarded_at: Lsn,
    /// True if retention wrote that record, false if it was recorded.
    pub by_retention: bool,
}

/// Applies a retention policy: chooses the checkpoints to evict (see
/// [`retention::choose`]), appends one `checkpoint.discard` per eviction,
/// then collects every blob not reachable from a retained checkpoint, from
/// the target of a rollback after the oldest retained one (the tree from
/// that rollback on, the head's included), or named by a record (`before`,
/// `after`, `diff`, `state`), and the application state of every rollback
/// target whose whole tree is kept.
/// Without a policy nothing is evicted; unreferenced blobs are still
/// collected. The store may leave some of them in place where reclaiming
/// them costs more than it frees (counted in [`GcSummary::left`]), except
/// under a `max_bytes` budget its bytes on disk would not fit otherwise
/// (see [`RetentionReport::stored_over_budget`]); [`apply_retention_with`]
/// with `compact` removes every one.
pub fn apply_retention<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    policy: &RetentionPolicy,
) -> Result<RetentionReport> {
    apply_retention_with(log, blobs, ws, policy, false)
}

/// [`apply_retention`], choosing how hard the blob collection works: with
/// `compact`, every unreferenced blob is removed now (every pack holding
/// one is rewritten), so the contents of a discarded checkpoint that
/// nothing else names can no longer be read; otherwise the store reclaims
/// only where it pays, or where a `max_bytes` budget needs it.
pub fn apply_retention_with<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    policy: &RetentionPolicy,
    compact: bool,
) -> Result<RetentionReport> {
    apply_retention_keeping(log, blobs, ws, policy, compact, &HashSet::new())
}

/// [`apply_retention_with`], also keeping `keep`: blobs put for records not
/// appended yet (the caller makes sure no blob is put meanwhile).
pub fn apply_retention_keeping<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    policy: &RetentionPolicy,
    compact: bool,
    keep: &HashSet<BlobHash>,
) -> Result<RetentionReport> {
    ws.check_writable("apply a retention policy")?;
    let _flow = ws.flow();
    record_interrupted_rollback(log, blobs, ws)?;
    let listed = list_checkpoints(log, ws, None)?;
    let all: Vec<CheckpointInfo> = listed.iter().filter(|c| !c.discarded).cloned().collect();
    let choice = if policy.is_empty() {
        retention::Choice::default()
    } else {
        record_evictions(log, blobs, policy, &listed, &all, keep)?
    };
    let evicted: HashSet<CheckpointId> = choice.evict.iter().copied().collect();
    let retained: Vec<&CheckpointInfo> = all.iter().filter(|c| !evicted.contains(&c.id)).collect();
    let every = list_checkpoints(log, ws, None)?;
    let mut marked = mark_live(log, blobs, &retained, &every, keep)?;
    marked.damaged.sort();
    marked.damaged.dedup();
    let live = marked.live;
    if !marked.collect {
        // Nothing collected, so no cache can name a collected blob.
        return Ok(RetentionReport {
            discarded: choice.evict,
            retained: retained.len(),
            live_blobs: live.len(),
            gc: GcSummary::default(),
            damaged: marked.damaged,
            collected: false,
            budget: choice.budget,
            collected_discarded: Vec::new(),
        });
    }
    let earlier = discarded_trees_here(blobs, &every, &evicted, &live)?;
    let gc = blobs.gc(
        &live,
        GcMode {
            compact,
            max_stored_bytes: policy.max_bytes,
        },
    )?;
    let collected_discarded = collected_among(blobs, earlier)?;
    forget_collected_in_caches(ws, &live)?;
    Ok(RetentionReport {
        discarded: choice.evict,
        retained: retained.len(),
        live_blobs: live.len(),
        gc,
        damaged: marked.damaged,
        collected: true,
        budget: choice.budget,
        collected_discarded,
    })
}

/// Decides which checkpoints `policy` evicts and records their discard
/// events.
fn record_evictions<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    policy: &RetentionPolicy,
    listed: &[CheckpointInfo],
    all: &[CheckpointInfo],
    keep: &HashSet<BlobHash>,
) -> Result<retention::Choice> {
    let mut cands = Vec::with_capacity(all.len());
    for c in all {
        let mut bl = Vec::new();
        if policy.max_bytes.is_some() {
            // A tree that cannot be listed counts as holding nothing:
            // the sizes only choose what to evict, never what to
            // collect (it is reported if it is kept).
            if let Ok(m) = manifest::list(blobs, &c.root) {
                bl = m.files().map(|(_, e)| (e.hash, e.size)).collect();
            }
        }
        cands.push(Candidate {
            id: c.id,
            session: c.session.clone(),
            blobs: bl,
        });
    }
    let pinned = if policy.max_bytes.is_some() {
        pinned_blobs(log, blobs, listed, keep)?
    } else {
        HashSet::new()
    };
    let choice = retention::decide(&cands, &pinned, policy);
    let events: Vec<Event> = choice
        .evict
        .iter()
        .filter_map(|id| all.iter().find(|c| c.id == *id))
        .map(|c| {
            let mut e = Event::new(EventKind::CheckpointDiscard, c.session.clone());
            e.checkpoint = Some(c.id);
            e.parents = vec![c.lsn];
            e.text = Some(policy.describe());
            e
        })
        .collect();
    log.append_batch(&events)?;
    Ok(choice)
}

/// What gc must keep, as far as the trees could be read.
struct LiveBlobs {
    /// Every blob kept: whole trees (a root with everything below it),
    /// and the blobs records name.
    live: HashSet<BlobHash>,
    /// Trees found damaged, by checkpoint.
    damaged: Vec<(CheckpointId, String)>,
    /// False when a damaged tree means what it names cannot be known:
    /// nothing is collected then.
    collect: bool,
}

/// Adds whole trees to a [`LiveBlobs`]; one damaged tree must not stop
/// retention for good (the newest checkpoint of a session is always
/// retained): it is reported, and when what it names cannot be known,
/// nothing is collected.
struct TreeKeeper<'b, B: ?Sized> {
    blobs: &'b B,
    seen: HashSet<BlobHash>,
    out: LiveBlobs,
}

impl<B: BlobAccess + ?Sized> TreeKeeper<'_, B> {
    fn keep_tree(&mut self, id: CheckpointId, root: &BlobHash) {
        let mut not_nodes = Vec::new();
        let r = manifest::reachable_past_non_nodes(
            self.blobs,
            root,
            &mut self.out.live,
            &mut self.seen,
            &mut not_nodes,
        );
        match r {
            Ok(()) => {
                for n in not_nodes {
                    let why = format!("blob {n} in its tree is not a manifest node");
                    self.out.damaged.push((id, why));
                }
            }
            Err(e) => {
                self.out.collect = false;
                self.out.damaged.push((id, e.to_string()));
            }
        }
    }
}

/// Marks what gc keeps: `keep`, the trees of the retained checkpoints,
/// what records name, and the trees (and states) rollbacks still need.
fn mark_live<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    retained: &[&CheckpointInfo],
    every: &[CheckpointInfo],
    keep: &HashSet<BlobHash>,
) -> Result<LiveBlobs> {
    let mut k = TreeKeeper {
        blobs,
        seen: HashSet::new(),
        out: LiveBlobs {
            live: keep.clone(),
            damaged: Vec::new(),
            collect: true,
        },
    };
    for c in retained {
        k.keep_tree(c.id, &c.root);
    }
    let dead: HashSet<Lsn> = every
        .iter()
        .filter(|c| c.discarded)
        .map(|c| c.lsn)
        .collect();
    // The tree after a rollback is its target's manifest: the states from
    // the rollback on (the head's among them) need it even when the target
    // is evicted. Rollbacks before the oldest retained checkpoint serve only
    // states retention gives up (every later state starts from a retained
    // checkpoint or a later rollback).
    let root_of: HashMap<CheckpointId, BlobHash> = every.iter().map(|c| (c.id, c.root)).collect();
    let oldest_retained = retained.iter().map(|c| c.lsn).min();
    let mut restored: Vec<(CheckpointId, BlobHash)> = Vec::new();
    let mut targets: HashSet<CheckpointId> = HashSet::new();
    log.for_each_from(Lsn::FIRST, &mut |r| {
        if !(r.event.kind == EventKind::CheckpointCreate && dead.contains(&r.lsn)) {
            k.out.live.extend(blobs_named(&r.event));
        }
        if r.event.kind == EventKind::Rollback && r.event.ok {
            targets.extend(r.event.target);
            if oldest_retained.is_none_or(|o| r.lsn > o) {
                restored.extend(
                    r.event
                        .target
                        .and_then(|t| root_of.get(&t).map(|root| (t, *root))),
                );
            }
        }
        Ok(())
    })?;
    for (id, root) in &restored {
        // A manifest an older gc already collected has nothing left to keep.
        if blobs.contains(root)? {
            k.keep_tree(*id, root);
        }
    }
    let mut out = k.out;
    // A rollback target whose whole tree stays (kept by the rule above, or
    // the tree of a checkpoint retained) can still be rolled back to, and
    // that hands back its application state: the state stays with the tree
    // (its `checkpoint.create` no longer keeps it once discarded). `live`
    // holds whole trees only: a root is in it with everything below it.
    for c in every.iter().filter(|c| targets.contains(&c.id)) {
        if let Some(state) = c.state {
            if out.live.contains(&c.root) && blobs.contains(&state)? {
                out.live.insert(state);
            }
        }
    }
    Ok(out)
}

/// Checkpoints discarded before this gc (by a recorded event, or by a gc
/// that stopped before collecting; not `evicted` now) whose tree is still
/// here and not `live`: if this gc collects it, the report names them.
fn discarded_trees_here<'c, B: BlobAccess + ?Sized>(
    blobs: &B,
    every: &'c [CheckpointInfo],
    evicted: &HashSet<CheckpointId>,
    live: &HashSet<BlobHash>,
) -> Result<Vec<&'c CheckpointInfo>> {
    let mut earlier: Vec<&CheckpointInfo> = Vec::new();
    for c in every
        .iter()
        .filter(|c| c.discarded && !evicted.contains(&c.id))
    {
        if !live.contains(&c.root) && blobs.contains(&c.root)? {
            earlier.push(c);
        }
    }
    Ok(earlier)
}

/// The checkpoints among `earlier` whose tree the gc collected.
fn collected_among<B: BlobAccess + ?Sized>(
    blobs: &B,
    earlier: Vec<&CheckpointInfo>,
) -> Result<Vec<CollectedDiscard>> {
    let mut collected = Vec::new();
    for c in earlier {
        if !blobs.contains(&c.root)? {
            collected.push(CollectedDiscard {
                id: c.id,
                discarded_at: c.discarded_at.unwrap_or(c.lsn),
                by_retention: c.discarded_by_retention,
            });
        }
    }
    Ok(collected)
}

/// Caches must never name a collected blob; durable, so a crash cannot
/// bring one back.
fn forget_collected_in_caches(ws: &Workspace, live: &HashSet<BlobHash>) -> Result<()> {
    let mut cache = (*ws.stat_cache().load()).clone();
    cache.retain_live(live);
    if let Err(e) = ws.stat_cache().save(std::sync::Arc::new(cache), true) {
        // On a full disk (the case gc must get a store out of) the cache
        // cannot be written again: removed instead, which needs no space,
        // the next checkpoint reads every file rather than trust it.
        match std::fs::remove_file(ws.stat_cache().path()) {
            Ok(()) => {}
            Err(re) if re.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return Err(e),
        }
        ws.stat_cache().forget();
    }
    if ws.load_last().is_some_and(|l| !live.contains(&l.root)) {
        ws.save_last(None)?;
    }
    Ok(())
}

/// The blobs a record names besides a checkpoint's tree (`before`,
/// `after`, `diff`, `state`): gc keeps them while the record is kept.
fn blobs_named(e: &Event) -> impl Iterator<Item = BlobHash> {
    [e.before, e.after, e.diff, e.state].into_iter().flatten()
}

/// The blobs gc keeps whatever retention evicts, as far as the choice of
/// evictions needs them: those records name (`before`, `after`, `diff`,
/// and `state` outside checkpoint records), `keep`, and the trees of
/// rollbacks after the oldest checkpoint not discarded, with their
/// application state (the tree from such a rollback on is its target's,
/// so gc keeps it). Evicting a checkpoint
/// frees none of them.
fn pinned_blobs<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    listed: &[CheckpointInfo],
    keep: &HashSet<BlobHash>,
) -> Result<HashSet<BlobHash>> {
    let mut pinned = keep.clone();
    let oldest = listed.iter().filter(|c| !c.discarded).map(|c| c.lsn).min();
    let mut targets: HashSet<CheckpointId> = HashSet::new();
    log.for_each_from(Lsn::FIRST, &mut |r| {
        if r.event.kind != EventKind::CheckpointCreate {
            pinned.extend(blobs_named(&r.event));
        }
        if r.event.kind == EventKind::Rollback && r.event.ok && oldest.is_none_or(|o| r.lsn > o) {
            targets.extend(r.event.target);
        }
        Ok(())
    })?;
    if targets.is_empty() {
        return Ok(pinned);
    }
    for c in listed.iter().filter(|c| targets.contains(&c.id)) {
        if let Ok(m) = manifest::list(blobs, &c.root) {
            pinned.extend(m.files().map(|(_, e)| e.hash));
            pinned.extend(c.state);
        }
    }
    Ok(pinned)
}
