//! Cluster keep-alive through anchors: one key per session and node whose expiry stands for
//! every term the session holds on that node (see "anchors" in `lua/common.lua`).
//!
//! A term bound to an anchor is live while the anchor lives with the epoch the term recorded
//! and while its own far deadline (a few dozen leases ahead) is ahead. A keep-alive renews
//! each anchor once, whatever the number of terms on its node, and renews a term's own
//! deadline only now and then (spread over keep-alives). The backend keeps, per session, what
//! it last learnt: the index of its lease names at a version, each anchor's epoch, and each
//! bound term's token and own deadline (as an `Instant` no later than the server's).
//!
//! Where a node does not serve an anchor's slot (slots moved), the terms bound to it count
//! by their own deadline alone, on the server and here: a crashed holder then blocks such a
//! name until that deadline. The next keep-alive binds them to the anchor of the node that
//! now serves them.

use super::super::keys::key_slot;
use crate::types::{LeaseName, Token};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A bound term's own deadline, in leases of its session.
pub(super) const HORIZON_LEASES: u32 = 16;

/// The fewest due terms a keep-alive binds again on one node, beyond the urgent ones.
const MIN_BATCH: usize = 16;

/// Trusted terms a keep-alive checks anyway on each node (picked at random), so that a
/// lease hash deleted or rewritten behind the library's back shows within a few renewals.
const SAMPLE: usize = 2;

/// A name of the session's index with the hash slot of its lease key.
#[derive(Clone, Debug)]
pub(super) struct Indexed {
    pub name: LeaseName,
    pub slot: u16,
}

/// A term this backend knows bound to an anchor.
#[derive(Clone, Debug)]
pub(super) struct Binding {
    pub anchor: Arc<str>,
    pub epoch: Arc<str>,
    pub token: Token,
    /// No later than the term's own deadline on its node.
    pub until: Instant,
}

/// What this backend knows of one session's cluster keep-alive.
#[derive(Debug, Default)]
pub(super) struct Anchored {
    /// The session's indexed lease names at a version.
    pub index: Option<(i64, Arc<Vec<Indexed>>)>,
    /// Each anchor's epoch as last seen.
    pub epochs: HashMap<Arc<str>, Arc<str>>,
    /// Bound terms by lease name (looked up for every term on every keep-alive: a fast
    /// hash; names are not attacker-chosen keys here).
    pub bound: HashMap<LeaseName, Binding, foldhash::fast::RandomState>,
}

impl Anchored {
    /// Records a binding unless a newer term of the name is recorded already.
    pub fn bind(&mut self, name: &LeaseName, b: Binding) {
        match self.bound.get(name) {
            Some(old) if old.token > b.token => {}
            _ => {
                self.bound.insert(name.clone(), b);
            }
        }
    }
}

/// What one node's keep-alive does with the session's leases there (indices into the
/// names given to [`plan`]).
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Bound to the node's anchor at the known epoch, own deadline far enough: held while
    /// the anchor is, with their token and own deadline.
    pub trusted: Vec<(usize, Token, Instant)>,
    /// Bound again (or for the first time) by the script, which checks each.
    pub rebind: Vec<usize>,
    /// How many of `rebind` (the last ones) are trusted terms picked as a sample: one found
    /// not held means the anchor cannot vouch for the others.
    pub sampled: usize,
}

/// Splits the leases `on_node` (indices into `names`, the session's leases on the node of
/// `anchor`) between the terms the anchor vouches for and those to bind again: unknown,
/// bound elsewhere or to another epoch, or with an own deadline less than half the horizon
/// ahead (all those under a quarter, and of the rest the soonest, at most an eighth of the
/// node's terms per keep-alive), plus a random sample of the trusted ones. With `trust`
/// false, every term is bound again.
pub(super) fn plan(
    trust: bool,
    st: Option<&Anchored>,
    anchor: &str,
    names: &[Indexed],
    on_node: &[usize],
    horizon: Duration,
    now: Instant,
) -> Plan {
    let mut plan = Plan::default();
    if !trust {
        plan.rebind = on_node.to_vec();
        return plan;
    }
    let known = st.and_then(|s| s.epochs.get(anchor));
    let (urgent, half) = (now + horizon / 4, now + horizon / 2);
    let mut due = Vec::new();
    for &i in on_node {
        let b = st
            .and_then(|s| s.bound.get(&names[i].name))
            .filter(|b| &*b.anchor == anchor && Some(&b.epoch) == known && b.until > urgent);
        match b {
            None => plan.rebind.push(i),
            Some(b) if b.until <= half => due.push((b.until, i, b.token)),
            Some(b) => plan.trusted.push((i, b.token, b.until)),
        }
    }
    due.sort_unstable();
    let batch = MIN_BATCH.max(on_node.len() / 8);
    for (k, (until, i, token)) in due.into_iter().enumerate() {
        if k < batch {
            plan.rebind.push(i);
        } else {
            plan.trusted.push((i, token, until));
        }
    }
    for _ in 0..SAMPLE.min(plan.trusted.len()) {
        let k = (crate::rand::u64() % plan.trusted.len() as u64) as usize;
        let (i, _, _) = plan.trusted.swap_remove(k);
        plan.rebind.push(i);
        plan.sampled += 1;
    }
    plan
}

/// A hash tag (the text between braces) whose keys land in `slot`.
pub(super) fn tag_for_slot(slot: u16) -> String {
    static TAGS: OnceLock<Mutex<HashMap<u16, String>>> = OnceLock::new();
    let tags = TAGS.get_or_init(Default::default);
    if let Some(t) = tags.lock().get(&slot) {
        return t.clone();
    }
    // About 16 384 tries on average: CRC16 spreads short strings evenly over the slots.
    let tag = (0u32..)
        .map(|i| format!("a{i}"))
        .find(|t| key_slot(t) == slot)
        .unwrap_or_default();
    tags.lock().insert(slot, tag.clone());
    tag
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(anchor: &str, epoch: &str, token: u64, until: Instant) -> Binding {
        Binding {
            anchor: anchor.into(),
            epoch: epoch.into(),
            token: Token::new(token).unwrap(),
            until,
        }
    }

    fn indexed(n: usize) -> Vec<Indexed> {
        (0..n)
            .map(|i| Indexed {
                name: LeaseName::new(format!("n{i}")).unwrap(),
                slot: 0,
            })
            .collect()
    }

    #[test]
    fn tags_land_in_their_slot() {
        for slot in [0, 1, 5000, 16383] {
            let tag = tag_for_slot(slot);
            assert_eq!(key_slot(&format!("x:{{{tag}}}:y")), slot);
        }
    }

    #[test]
    fn plans_trust_only_current_bindings_and_spread_renewals() {
        let now = Instant::now();
        let horizon = Duration::from_secs(160);
        let names = indexed(100);
        let all: Vec<usize> = (0..100).collect();
        let mut st = Anchored::default();
        st.epochs.insert("A".into(), "e1".into());
        for (i, n) in names.iter().enumerate() {
            let until = match i {
                0..=9 => now + Duration::from_secs(10),   // urgent
                10..=39 => now + Duration::from_secs(60), // due
                _ => now + Duration::from_secs(150),
            };
            st.bind(&n.name, bound("A", "e1", 1, until));
        }
        st.bind(&names[40].name, bound("B", "e1", 1, now + horizon)); // another anchor
        st.bind(&names[41].name, bound("A", "e0", 1, now + horizon)); // an old epoch
        st.bound.remove(&names[42].name); // unknown
        let p = plan(true, Some(&st), "A", &names, &all, horizon, now);
        assert_eq!(p.trusted.len() + p.rebind.len(), names.len());
        for i in [40, 41, 42] {
            assert!(p.rebind.contains(&i), "n{i}");
        }
        for i in 0..10 {
            assert!(p.rebind.contains(&i), "urgent n{i}");
        }
        // 3 odd ones, 10 urgent, of the 30 due the batch of 16, and a sample of 2.
        assert_eq!(p.rebind.len(), 3 + 10 + 16 + 2);
        assert_eq!(p.sampled, 2);
        let mut seen = p.rebind.clone();
        seen.extend(p.trusted.iter().map(|t| t.0));
        seen.sort_unstable();
        assert_eq!(seen, all, "every lease once");
        assert!(plan(true, None, "A", &names, &all, horizon, now)
            .trusted
            .is_empty());
        let distrust = plan(false, Some(&st), "A", &names, &all, horizon, now);
        assert!(distrust.trusted.is_empty() && distrust.sampled == 0);
        assert_eq!(distrust.rebind, all);
    }

    #[test]
    fn a_binding_of_an_older_term_never_replaces_a_newer_one() {
        let now = Instant::now();
        let name = LeaseName::new("n").unwrap();
        let mut st = Anchored::default();
        st.bind(&name, bound("A", "e", 5, now));
        st.bind(&name, bound("A", "e", 4, now));
        assert_eq!(st.bound[&name].token.get(), 5);
        st.bind(&name, bound("A", "e", 6, now));
        assert_eq!(st.bound[&name].token.get(), 6);
    }
}
