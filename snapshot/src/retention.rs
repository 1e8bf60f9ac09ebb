//! Retention as an explicit policy: a pure [`decide`] (and its short form
//! [`choose`]) that decides which checkpoints to evict, carried out by
//! `apply_retention` (which records each eviction and then collects
//! unreferenced blobs).

use std::collections::{BTreeMap, HashMap, HashSet};

use cairn_codec::{BlobHash, CheckpointId, Lsn};

/// Why a checkpoint may not be discarded (see [`may_discard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscardRefused {
    /// It was discarded already, by the record at this LSN: a second
    /// record would say nothing true.
    AlreadyDiscarded(Lsn),
    /// It is the newest checkpoint of its session that is not discarded,
    /// which cairn always keeps restorable.
    NewestOfSession,
}

/// The newest checkpoint of a session that is not discarded, from every
/// checkpoint of that session with the LSN of the record that discarded
/// it, if one did.
pub fn newest_kept(of_session: &[(CheckpointId, Option<Lsn>)]) -> Option<CheckpointId> {
    of_session
        .iter()
        .filter(|(_, discarded)| discarded.is_none())
        .map(|(id, _)| *id)
        .max()
}

/// The rule every discard keeps, whether retention chooses it ([`decide`])
/// or a platform records it: a checkpoint is discarded once, and the
/// newest checkpoint of a session that is not discarded is always kept,
/// so every session can still be rolled back to its last state.
/// `of_session`: every checkpoint of `id`'s session, with the LSN of the
/// record that discarded it, if one did.
pub fn may_discard(
    id: CheckpointId,
    of_session: &[(CheckpointId, Option<Lsn>)],
) -> Result<(), DiscardRefused> {
    if let Some(at) = of_session
        .iter()
        .find(|(o, _)| *o == id)
        .and_then(|(_, at)| *at)
    {
        return Err(DiscardRefused::AlreadyDiscarded(at));
    }
    match newest_kept(of_session) {
        Some(newest) if newest > id => Ok(()),
        _ => Err(DiscardRefused::NewestOfSession),
    }
}

/// How many checkpoints to keep. Both limits `None` means keep everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep at most this many checkpoints per session (the newest ones).
    pub keep_per_session: Option<usize>,
    /// Keep the distinct file contents the retained checkpoints reference
    /// under this many bytes (uncompressed), evicting the oldest first,
    /// and only while evicting frees bytes toward the budget. The blob
    /// store on disk (compressed, but also holding trees, blobs records
    /// name, and unreferenced blobs not yet reclaimed) is held to it too:
    /// gc reclaims unreferenced blobs while the store is over it (see
    /// `RetentionReport::stored_over_budget`).
    pub max_bytes: Option<u64>,
}

impl RetentionPolicy {
    /// True if the policy evicts nothing.
    pub fn is_empty(&self) -> bool {
        self.keep_per_session.is_none() && self.max_bytes.is_none()
    }

    /// The policy in words, as `checkpoint.discard` records carry it (they
    /// stay in the log for good, so never Rust `Debug` text):
    /// "retention: keep 2 per session", "retention: budget 100000 bytes",
    /// or both joined by "; ". Starts with [`RETENTION_TEXT_PREFIX`].
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.keep_per_session {
            parts.push(format!("keep {} per session", n.max(1)));
        }
        if let Some(b) = self.max_bytes {
            parts.push(format!("budget {b} bytes"));
        }
        if parts.is_empty() {
            parts.push("no policy".to_string());
        }
        format!("{RETENTION_TEXT_PREFIX}{}", parts.join("; "))
    }
}

/// How the `text` of every `checkpoint.discard` that retention appends
/// starts: what tells a discard by retention from one recorded by the
/// platform (`cairn record`, an import).
pub const RETENTION_TEXT_PREFIX: &str = "retention: ";

/// Who discarded a checkpoint, in the words errors use: "by retention",
/// or "by a recorded checkpoint.discard event".
pub fn discarded_by_words(by_retention: bool) -> &'static str {
    if by_retention {
        "by retention"
    } else {
        "by a recorded checkpoint.discard event"
    }
}

/// True if the `checkpoint.discard` event `e` was written by retention (its
/// text starts with [`RETENTION_TEXT_PREFIX`]), not recorded by the platform.
pub fn discarded_by_retention(e: &cairn_codec::Event) -> bool {
    e.text
        .as_deref()
        .is_some_and(|t| t.starts_with(RETENTION_TEXT_PREFIX))
}

/// A checkpoint as the policy sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its id (ids grow with time: the oldest has the smallest).
    pub id: CheckpointId,
    /// Its session.
    pub session: String,
    /// The blobs it references, with their sizes (needed only for `max_bytes`).
    pub blobs: Vec<(BlobHash, u64)>,
}

/// How the size budget stands after the evictions chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetOutcome {
    /// The budget (`RetentionPolicy::max_bytes`).
    pub max_bytes: u64,
    /// Distinct bytes of checkpoint contents the store keeps after the
    /// evictions: those of the retained checkpoints, and those of evicted
    /// ones that stay because something else still names them.
    pub kept_bytes: u64,
    /// What no eviction can free: the newest checkpoint of each session
    /// (always kept) and contents something else still names.
    pub floor_bytes: u64,
}

impl BudgetOutcome {
    /// True if the kept contents fit in the budget.
    pub fn met(&self) -> bool {
        self.kept_bytes <= self.max_bytes
    }
}

/// What the policy decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    /// The checkpoints to evict, oldest first.
    pub evict: Vec<CheckpointId>,
    /// How the budget stands (with `max_bytes` only).
    pub budget: Option<BudgetOutcome>,
}

/// Chooses the checkpoints to evict, oldest first: [`decide`] with no
/// blob kept by anything but checkpoints. Pure.
pub fn choose(candidates: &[Candidate], policy: &RetentionPolicy) -> Vec<CheckpointId> {
    decide(candidates, &HashSet::new(), policy).evict
}

/// Chooses the checkpoints to evict, oldest first. Never evicts the newest
/// checkpoint of a session (so every session can still be rolled back to
/// its last state). `pinned` holds the blobs the store keeps whatever is
/// evicted (named by records, or by the tree a rollback restored):
/// evicting a checkpoint frees only its blobs that no retained checkpoint
/// and nothing pinned holds. Under `max_bytes`, checkpoints are evicted
/// oldest first only while that frees bytes: evictions after the last one
/// that freed anything are not made (a checkpoint whose contents are all
/// in a newer one is kept, since evicting it gains nothing), and
/// [`Choice::budget`] says whether the budget is met. Pure.
pub fn decide(
    candidates: &[Candidate],
    pinned: &HashSet<BlobHash>,
    policy: &RetentionPolicy,
) -> Choice {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by_key(|c| c.id);
    let newest = newest_per_session(&sorted);
    let protected = |c: &Candidate| newest.get(c.session.as_str()) == Some(&Some(c.id));
    let mut evict: BTreeMap<CheckpointId, ()> = BTreeMap::new();
    if let Some(n) = policy.keep_per_session {
        evict_past_count(&sorted, n, &mut evict);
    }
    let budget = policy
        .max_bytes
        .map(|max| evict_for_budget(&sorted, pinned, max, &protected, &mut evict));
    Choice {
        evict: evict.into_keys().collect(),
        budget,
    }
}

/// The newest checkpoint of each session among the candidates (`sorted`
/// by id), which is never evicted. The candidates are the checkpoints not
/// discarded (`may_discard`'s rule).
fn newest_per_session<'c>(sorted: &[&'c Candidate]) -> HashMap<&'c str, Option<CheckpointId>> {
    let mut of_session: HashMap<&str, Vec<(CheckpointId, Option<Lsn>)>> = HashMap::new();
    for c in sorted {
        of_session
            .entry(c.session.as_str())
            .or_default()
            .push((c.id, None));
    }
    of_session
        .iter()
        .map(|(s, all)| (*s, newest_kept(all)))
        .collect()
}

/// Evicts all but the newest `n` (at least one) checkpoints of each
/// session.
fn evict_past_count(sorted: &[&Candidate], n: usize, evict: &mut BTreeMap<CheckpointId, ()>) {
    let mut per: HashMap<&str, Vec<CheckpointId>> = HashMap::new();
    for c in sorted {
        per.entry(c.session.as_str()).or_default().push(c.id);
    }
    for ids in per.values() {
        let keep = n.max(1);
        if ids.len() > keep {
            for id in &ids[..ids.len() - keep] {
                evict.insert(*id, ());
            }
        }
    }
}

/// Evicts checkpoints oldest first (not `protected` ones) while the store
/// would keep more than `max` bytes, and only while that frees bytes (see
/// [`decide`]); how the budget stands after.
fn evict_for_budget(
    sorted: &[&Candidate],
    pinned: &HashSet<BlobHash>,
    max: u64,
    protected: &dyn Fn(&Candidate) -> bool,
    evict: &mut BTreeMap<CheckpointId, ()>,
) -> BudgetOutcome {
    let pinned_bytes = pinned_bytes(sorted, pinned);
    let mut refs: HashMap<BlobHash, (u64, u64)> = HashMap::new();
    for c in sorted.iter().filter(|c| !evict.contains_key(&c.id)) {
        for (h, s) in c.blobs.iter().filter(|(h, _)| !pinned.contains(h)) {
            refs.entry(*h).or_insert((0, *s)).0 += 1;
        }
    }
    let mut total: u64 = refs
        .values()
        .map(|v| v.1)
        .fold(pinned_bytes, u64::saturating_add);
    // Evictions that freed nothing yet: made only once a later one
    // frees a blob they hold too (two checkpoints sharing a blob free
    // it together), dropped at the end otherwise. Their counts stay
    // lowered: they freed nothing, so `total` is what the store keeps
    // with them retained.
    let mut pending: Vec<&Candidate> = Vec::new();
    for c in sorted {
        if total <= max {
            break;
        }
        if protected(c) || evict.contains_key(&c.id) {
            continue;
        }
        let mut freed: HashSet<BlobHash> = HashSet::new();
        for (h, _) in &c.blobs {
            if let Some(v) = refs.get_mut(h) {
                v.0 -= 1;
                if v.0 == 0 {
                    total = total.saturating_sub(v.1);
                    refs.remove(h);
                    freed.insert(*h);
                }
            }
        }
        pending.push(c);
        if !freed.is_empty() {
            pending.retain(|p| {
                let holds = p.blobs.iter().any(|(h, _)| freed.contains(h));
                if holds {
                    evict.insert(p.id, ());
                }
                !holds
            });
        }
    }
    let mut floor: HashSet<BlobHash> = HashSet::new();
    let mut floor_bytes = pinned_bytes;
    for c in sorted.iter().filter(|c| protected(c)) {
        for (h, s) in &c.blobs {
            if !pinned.contains(h) && floor.insert(*h) {
                floor_bytes = floor_bytes.saturating_add(*s);
            }
        }
    }
    BudgetOutcome {
        max_bytes: max,
        kept_bytes: total,
        floor_bytes,
    }
}

/// The bytes of the pinned contents any checkpoint holds: they stay
/// whatever is evicted.
fn pinned_bytes(sorted: &[&Candidate], pinned: &HashSet<BlobHash>) -> u64 {
    let mut pinned_sizes: HashMap<BlobHash, u64> = HashMap::new();
    for c in sorted {
        for (h, s) in c.blobs.iter().filter(|(h, _)| pinned.contains(h)) {
            pinned_sizes.insert(*h, *s);
        }
    }
    pinned_sizes
        .values()
        .fold(0, |a: u64, s| a.saturating_add(*s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule `decide` and a recorded discard share: once only, and
    /// never the newest checkpoint of a session not discarded.
    #[test]
    fn a_discard_keeps_the_newest_of_a_session_and_happens_once() {
        let id = |n| CheckpointId(Lsn(n));
        let all = [(id(2), None), (id(5), Some(Lsn(9))), (id(7), None)];
        assert_eq!(newest_kept(&all), Some(id(7)));
        assert_eq!(may_discard(id(2), &all), Ok(()));
        assert_eq!(
            may_discard(id(5), &all),
            Err(DiscardRefused::AlreadyDiscarded(Lsn(9)))
        );
        assert_eq!(
            may_discard(id(7), &all),
            Err(DiscardRefused::NewestOfSession)
        );
        // With the newest discarded, the one before it is the newest kept.
        let newest_gone = [(id(2), None), (id(7), Some(Lsn(8)))];
        assert_eq!(
            may_discard(id(2), &newest_gone),
            Err(DiscardRefused::NewestOfSession)
        );
        assert_eq!(newest_kept(&[]), None);
    }

    fn c(n: u64, s: &str, blobs: &[(u8, u64)]) -> Candidate {
        Candidate {
            id: CheckpointId(Lsn(n)),
            session: s.into(),
            blobs: blobs
                .iter()
                .map(|(b, z)| (BlobHash([*b; 32]), *z))
                .collect(),
        }
    }
    fn ids(v: &[u64]) -> Vec<CheckpointId> {
        v.iter().map(|n| CheckpointId(Lsn(*n))).collect()
    }

    #[test]
    fn no_policy_evicts_nothing() {
        let cs = vec![c(1, "a", &[]), c(2, "a", &[])];
        assert!(choose(&cs, &RetentionPolicy::default()).is_empty());
    }

    #[test]
    fn keep_per_session_evicts_oldest_of_each_session() {
        let cs = vec![
            c(1, "a", &[]),
            c(2, "b", &[]),
            c(3, "a", &[]),
            c(4, "a", &[]),
            c(5, "b", &[]),
        ];
        let p = RetentionPolicy {
            keep_per_session: Some(2),
            max_bytes: None,
        };
        assert_eq!(choose(&cs, &p), ids(&[1]));
        let p = RetentionPolicy {
            keep_per_session: Some(0),
            max_bytes: None,
        };
        assert_eq!(
            choose(&cs, &p),
            ids(&[1, 2, 3]),
            "never the newest of a session"
        );
    }

    #[test]
    fn max_bytes_counts_shared_blobs_once() {
        // 1 and 2 share blob 9 (100 bytes); 3 holds blob 8.
        let cs = vec![
            c(1, "a", &[(9, 100), (1, 50)]),
            c(2, "a", &[(9, 100)]),
            c(3, "a", &[(8, 10)]),
        ];
        let p = RetentionPolicy {
            keep_per_session: None,
            max_bytes: Some(160),
        };
        assert!(choose(&cs, &p).is_empty(), "160 distinct bytes fit");
        let p = RetentionPolicy {
            keep_per_session: None,
            max_bytes: Some(150),
        };
        assert_eq!(choose(&cs, &p), ids(&[1]));
        let p = RetentionPolicy {
            keep_per_session: None,
            max_bytes: Some(0),
        };
        assert_eq!(
            choose(&cs, &p),
            ids(&[1, 2]),
            "the newest stays even over budget"
        );
    }

    /// Trial P16: files only accumulate, so every older checkpoint's
    /// contents are all in the newest: evicting them frees nothing, so
    /// none is evicted, and the budget is reported as not met.
    #[test]
    fn max_bytes_never_evicts_what_frees_nothing() {
        let cs = vec![
            c(1, "a", &[(9, 100)]),
            c(2, "a", &[(9, 100), (1, 10)]),
            c(3, "a", &[(9, 100), (1, 10), (2, 10)]),
        ];
        let p = RetentionPolicy {
            keep_per_session: None,
            max_bytes: Some(50),
        };
        let got = decide(&cs, &HashSet::new(), &p);
        assert!(got.evict.is_empty(), "{got:?}");
        let b = got.budget.unwrap();
        assert!(!b.met());
        assert_eq!((b.kept_bytes, b.floor_bytes), (120, 120));
    }

    /// Only the evictions up to the last one that freed bytes are made; a
    /// checkpoint that frees a blob only together with an older one is
    /// evicted with it; one that frees nothing between them is kept.
    #[test]
    fn max_bytes_evicts_only_what_frees_bytes() {
        let cs = vec![
            c(1, "a", &[(5, 100)]),
            c(2, "a", &[(9, 10)]),
            c(3, "a", &[(5, 100), (7, 30)]),
            c(4, "a", &[(7, 30)]),
            c(5, "a", &[(9, 10)]),
        ];
        let p = RetentionPolicy {
            keep_per_session: None,
            max_bytes: Some(0),
        };
        let got = decide(&cs, &HashSet::new(), &p);
        // 1 alone frees nothing (3 holds 5); 2 frees nothing (5 holds 9);
        // 3 frees 5 with 1; 4 frees 7 with 3. Blob 9 stays with 5.
        assert_eq!(got.evict, ids(&[1, 3, 4]));
        let b = got.budget.unwrap();
        assert_eq!((b.kept_bytes, b.floor_bytes, b.met()), (10, 10, false));
    }

    /// A blob something else keeps (a record names it) is never freed by an
    /// eviction, so evicting its only checkpoint gains nothing.
    #[test]
    fn pinned_blobs_are_never_counted_as_freed() {
        let cs = vec![c(1, "a", &[(5, 100)]), c(2, "a", &[(6, 10)])];
        let p = RetentionPolicy {
            keep_per_session: None,
            max_bytes: Some(50),
        };
        let pinned: HashSet<BlobHash> = [BlobHash([5; 32])].into_iter().collect();
        let got = decide(&cs, &pinned, &p);
        assert!(got.evict.is_empty(), "{got:?}");
        assert_eq!(got.budget.unwrap().kept_bytes, 110);
        assert_eq!(decide(&cs, &HashSet::new(), &p).evict, ids(&[1]));
    }

    /// Trial P14.2: the policy in words, never Rust `Debug` text.
    #[test]
    fn the_policy_is_described_in_words() {
        let p = RetentionPolicy {
            keep_per_session: Some(2),
            max_bytes: None,
        };
        assert_eq!(p.describe(), "retention: keep 2 per session");
        let p = RetentionPolicy {
            keep_per_session: Some(5),
            max_bytes: Some(100_000_000),
        };
        assert_eq!(
            p.describe(),
            "retention: keep 5 per session; budget 100000000 bytes"
        );
    }
}
