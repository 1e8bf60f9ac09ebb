//! Retention as an explicit policy: a pure [`choose`] that decides which
//! checkpoints to evict, carried out by `apply_retention` (which records
//! each eviction and then collects unreferenced blobs).

use std::collections::{BTreeMap, HashMap};

use cairn_codec::{BlobHash, CheckpointId};

/// How many checkpoints to keep. Both limits `None` means keep everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep at most this many checkpoints per session (the newest ones).
    pub keep_per_session: Option<usize>,
    /// Keep the distinct file contents the retained checkpoints reference
    /// under this many bytes (uncompressed; the store holds them
    /// compressed, so the disk use is lower), evicting the oldest first.
    pub max_bytes: Option<u64>,
}

impl RetentionPolicy {
    /// True if the policy evicts nothing.
    pub fn is_empty(&self) -> bool {
        self.keep_per_session.is_none() && self.max_bytes.is_none()
    }
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

/// Chooses the checkpoints to evict, oldest first. Never evicts the newest
/// checkpoint of a session (so every session can still be rolled back to
/// its last state). Pure.
pub fn choose(candidates: &[Candidate], policy: &RetentionPolicy) -> Vec<CheckpointId> {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by_key(|c| c.id);
    let mut newest: HashMap<&str, CheckpointId> = HashMap::new();
    for c in &sorted {
        newest.insert(c.session.as_str(), c.id);
    }
    let protected = |c: &Candidate| newest.get(c.session.as_str()) == Some(&c.id);
    let mut evict: BTreeMap<CheckpointId, ()> = BTreeMap::new();
    if let Some(n) = policy.keep_per_session {
        let mut per: HashMap<&str, Vec<CheckpointId>> = HashMap::new();
        for c in &sorted {
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
    if let Some(max) = policy.max_bytes {
        let mut refs: HashMap<BlobHash, (u64, u64)> = HashMap::new();
        for c in sorted.iter().filter(|c| !evict.contains_key(&c.id)) {
            for (h, s) in &c.blobs {
                refs.entry(*h).or_insert((0, *s)).0 += 1;
            }
        }
        let mut total: u64 = refs.values().map(|v| v.1).fold(0, u64::saturating_add);
        for c in &sorted {
            if total <= max {
                break;
            }
            if protected(c) || evict.contains_key(&c.id) {
                continue;
            }
            evict.insert(c.id, ());
            for (h, _) in &c.blobs {
                if let Some(v) = refs.get_mut(h) {
                    v.0 -= 1;
                    if v.0 == 0 {
                        total = total.saturating_sub(v.1);
                        refs.remove(h);
                    }
                }
            }
        }
    }
    evict.into_keys().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_codec::Lsn;

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
}
