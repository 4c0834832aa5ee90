//! The routed keep-alive (Redis Cluster, or `route_by_slot`): the session call, then one
//! script per node through the session's anchor there ([`super::anchors`]), or slot by slot
//! when that cannot be done.

use super::super::backend::{lease_ms, Base};
use super::super::keys::key_slot;
use super::super::reply::{
    array_of, bad_reply, expired, gone, group_in, lease_in, renewed, rw_terms_in, strings, token,
};
use super::super::scripting::{Reply, Role, ScriptCall};
use super::super::scripts::scripts;
use super::anchors::{self, Binding, Indexed};
use super::routed::Routed;
use super::slot_map::SlotMap;
use crate::error::Result;
use crate::spi::{HeldLease, HeldRw, KeepAlive};
use crate::types::{LeaseName, SessionId, Token};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const OP: &str = "keeping a session alive";

/// What a keep-alive found of one indexed lease: its name, its token (`None`: not held)
/// and the time its term has left.
type Outcome = (LeaseName, Option<Token>, Duration);

/// What a keep-alive's node scripts found: the indexed leases, and the read-write terms they
/// renewed (a lock whose node's script failed lists none: its terms are then lost).
type Outcomes = (Vec<Outcome>, Vec<HeldRw>);

/// A read-write lock the session holds or waits for (as this backend knows): its name, the
/// stamp it was noted with, and the hash slot of its key.
struct RwName {
    name: LeaseName,
    stamp: u64,
    slot: u16,
}

/// One keep-alive after its session call: what the node calls need.
struct Round<'a> {
    session: &'a SessionId,
    /// The session's indexed leases.
    names: &'a [Indexed],
    /// The read-write locks it holds or waits for.
    rw: &'a [RwName],
    group_keys: &'a [String],
    /// What the session call renewed the session for.
    remaining: Duration,
    /// When the session call answered.
    answered: Instant,
    /// The session's lock-delay in ms (0: none), kept with each anchor's epoch.
    delay_ms: u64,
}

/// One node's share of a keep-alive: indices into the session's names and read-write locks,
/// and group keys.
#[derive(Default)]
struct NodeWork {
    leases: Vec<usize>,
    rw: Vec<usize>,
    groups: Vec<String>,
}

/// What a later keep-alive script may grant of the session's `remaining` time once `elapsed`
/// passed since the session call answered, in whole ms; `None` once nothing is left.
fn slot_left(remaining: Duration, elapsed: Duration) -> Option<u64> {
    remaining
        .checked_sub(elapsed)
        .map(|d| d.as_millis() as u64)
        .filter(|&ms| ms > 0)
}

impl Routed {
    /// The routed keep-alive of `session` for `lease` (see [`Self::keep_alive_routed`]).
    pub(super) fn keep_alive(
        &self,
        b: &Base,
        session: &SessionId,
        lease: Duration,
    ) -> Result<KeepAlive> {
        self.keep_alive_routed(
            b,
            session,
            lease,
            lease_ms(lease),
            &b.keys.session_keys(session),
        )
    }

    /// Routed keep-alive: `keep_alive_session.lua` on the session's slot (its lease names only
    /// when the index changed since the version this backend knows), then the terms and
    /// memberships on their nodes, each carrying what the session has left minus the time
    /// since the session call answered.
    fn keep_alive_routed(
        &self,
        b: &Base,
        session: &SessionId,
        lease: Duration,
        lease_ms: u64,
        index: &[String; 4],
    ) -> Result<KeepAlive> {
        let known = self
            .anchored
            .lock()
            .get(session)
            .and_then(|a| a.index.as_ref().map(|(v, _)| *v));
        let dropped: Vec<String> = self
            .stale
            .lock()
            .get(session)
            .map(|m| {
                m.iter()
                    .filter(|(_, since)| since.elapsed() >= lease)
                    .map(|(n, _)| n.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut args = vec![
            lease_ms.to_string(),
            known.map(|v| v.to_string()).unwrap_or_default(),
        ];
        args.extend(dropped.iter().cloned());
        let sent = Instant::now();
        let r = b.eval(Role::KeepAlive, &scripts().keep_alive_session, index, &args)?;
        let answered = Instant::now();
        if gone(&r) {
            self.forget_expired(session);
            return Err(expired(session));
        }
        let a = array_of(OP, &r, 6)?;
        let remaining = renewed(OP, &r, lease_ms)?;
        // New read-write entries end by this deadline (no later than the server's).
        self.rw.renewed(session, sent + remaining, Some(lease));
        let delay_ms = a[5]
            .as_int()
            .and_then(|d| u64::try_from(d).ok())
            .ok_or_else(|| bad_reply(OP, &r))?;
        self.rw.delay_known(session, delay_ms);
        let version = a[1].as_int().filter(|v| *v >= 0);
        let listed = a[2].as_int().filter(|l| *l == 0 || *l == 1);
        let (Some(version), Some(listed)) = (version, listed) else {
            return Err(bad_reply(OP, &r));
        };
        let groups = strings(OP, &a[4])?;
        for g in &groups {
            group_in(OP, &r, g)?;
        }
        if !dropped.is_empty() {
            if let Some(m) = self.stale.lock().get_mut(session) {
                for n in &dropped {
                    m.remove(n);
                }
            }
        }
        let names: Arc<Vec<Indexed>> = if listed == 1 {
            let names = strings(OP, &a[3])?
                .into_iter()
                .map(|n| {
                    Ok(Indexed {
                        slot: key_slot(&b.keys.lease(&n)),
                        name: lease_in(OP, &r, &n)?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let names = Arc::new(names);
            let mut st = self.anchored.lock();
            st.entry(session.clone()).or_default().index = Some((version, names.clone()));
            names
        } else {
            let cached = self
                .anchored
                .lock()
                .get(session)
                .and_then(|s| match &s.index {
                    Some((v, names)) if *v == version => Some(names.clone()),
                    _ => None,
                });
            match cached {
                Some(names) if strings(OP, &a[3])?.is_empty() => names,
                Some(_) => return Err(bad_reply(OP, &r)),
                // "Unchanged" from a version this backend no longer keeps (a concurrent
                // keep-alive replaced it): ask again for the full list.
                None => {
                    if let Some(s) = self.anchored.lock().get_mut(session) {
                        s.index = None;
                    }
                    return self.keep_alive_routed(b, session, lease, lease_ms, index);
                }
            }
        };
        let group_keys: Vec<String> = groups.iter().map(|g| b.keys.group(g)).collect();
        let rw: Vec<RwName> = self
            .rw
            .names(session)
            .into_iter()
            .map(|(name, stamp)| RwName {
                slot: key_slot(&b.keys.rw(name.as_str())),
                name,
                stamp,
            })
            .collect();
        let mut leases = Vec::with_capacity(names.len());
        if names.is_empty() && group_keys.is_empty() && rw.is_empty() {
            return Ok(KeepAlive {
                remaining,
                leases,
                rw: Vec::new(),
            });
        }
        let Some(left_ms) = slot_left(remaining, answered.elapsed()) else {
            return Ok(KeepAlive {
                remaining,
                leases,
                rw: Vec::new(),
            });
        };
        let left = Duration::from_millis(left_ms);
        let round = Round {
            session,
            names: &names,
            rw: &rw,
            group_keys: &group_keys,
            remaining,
            answered,
            delay_ms,
        };
        let (outcomes, rw_held) = match self.keep_alive_by_anchor(b, &round, lease, true)? {
            Some(o) => o,
            None => {
                // The slot-by-slot scripts unbind what they renew: nothing known stays true.
                if let Some(s) = self.anchored.lock().get_mut(session) {
                    s.bound.clear();
                    s.epochs.clear();
                }
                self.keep_alive_by_slot(b, &round, left)?
            }
        };
        let mut stale = self.stale.lock();
        let mut missed = stale.remove(session).unwrap_or_default();
        for (name, t, left) in outcomes {
            match t {
                Some(token) => {
                    if !missed.is_empty() {
                        missed.remove(name.as_str());
                    }
                    leases.push(HeldLease {
                        name,
                        token,
                        remaining: left,
                    });
                }
                None => {
                    missed
                        .entry(name.as_str().to_owned())
                        .or_insert_with(Instant::now);
                }
            }
        }
        if !missed.is_empty() {
            stale.insert(session.clone(), missed);
        }
        Ok(KeepAlive {
            remaining,
            leases,
            rw: rw_held,
        })
    }

    /// One `keep_alive_anchor.lua` per node (the `CLUSTER SLOTS` map, read at most every
    /// 30 s), pipelined to every node at once: each renews the session's anchor there and
    /// binds again the terms [`anchors::plan`] picks; the others are held while the anchor
    /// lived with the epoch they were bound to, unless a sampled one was not held (changed
    /// behind the library's back): every term is then checked, by one more round that trusts
    /// nothing (`again` false). Each also renews the session's read-write entries there and
    /// answers its terms. `None` when the map is unknown or any node refused (a slot moved):
    /// the caller renews slot by slot, and the map is read again after a while.
    fn keep_alive_by_anchor(
        &self,
        b: &Base,
        round: &Round<'_>,
        lease: Duration,
        again: bool,
    ) -> Result<Option<Outcomes>> {
        let Round {
            session,
            names,
            rw,
            group_keys,
            remaining,
            answered,
            delay_ms,
        } = *round;
        let Some(map) = self.slot_maps.get(&*b.scripting) else {
            return Ok(None);
        };
        // Measured after reading the map, so a slow `CLUSTER SLOTS` does not stretch terms.
        let Some(left_ms) = slot_left(remaining, answered.elapsed()) else {
            return Ok(Some((Vec::new(), Vec::new())));
        };
        let left = Duration::from_millis(left_ms);
        let Some(nodes) = by_node(&map, names, rw, group_keys) else {
            return Ok(None);
        };
        let horizon = lease.saturating_mul(anchors::HORIZON_LEASES);
        let now = Instant::now();
        let plans: Vec<(Arc<str>, Option<Arc<str>>, anchors::Plan)> = {
            let st = self.anchored.lock();
            let st = st.get(session);
            nodes
                .iter()
                .map(|(node, w)| {
                    let tag = map.tags.get(*node).map(String::as_str).unwrap_or_default();
                    let anchor: Arc<str> = b.keys.anchor(tag, session).into();
                    let known = st.and_then(|s| s.epochs.get(&anchor)).cloned();
                    let plan = anchors::plan(again, st, &anchor, names, &w.leases, horizon, now);
                    (anchor, known, plan)
                })
                .collect()
        };
        let horizon_ms = lease_ms(horizon).to_string();
        let calls: Vec<ScriptCall<'_>> = plans
            .iter()
            .zip(nodes.values())
            .map(|((anchor, known, plan), w)| {
                let mut args =
                    Vec::with_capacity(7 + plan.rebind.len() + w.rw.len() + w.groups.len());
                args.extend([
                    session.to_string(),
                    left_ms.to_string(),
                    known.as_deref().unwrap_or_default().to_owned(),
                    horizon_ms.clone(),
                    delay_ms.to_string(),
                    plan.rebind.len().to_string(),
                    w.rw.len().to_string(),
                ]);
                args.extend(
                    plan.rebind
                        .iter()
                        .map(|&i| b.keys.lease(names[i].name.as_str())),
                );
                args.extend(w.rw.iter().map(|&i| b.keys.rw(rw[i].name.as_str())));
                args.extend(w.groups.iter().cloned());
                ScriptCall {
                    script: &scripts().keep_alive_anchor,
                    keys: vec![anchor.to_string()],
                    args,
                }
            })
            .collect();
        let sent = Instant::now();
        let replies = match b.scripting.eval_many(Role::KeepAlive, &calls) {
            Ok(r) => r,
            Err(e) => {
                log::debug!(
                    "keep-alive of session {session} by node failed ({}); by slot",
                    e.report()
                );
                // No by-node attempt for a while (a node down, slots moving): an empty map
                // sends every keep-alive slot by slot until it is read again.
                self.slot_maps.place_none();
                return Ok(None);
            }
        };
        self.by_node
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut out = Vec::with_capacity(names.len());
        let mut rw_held = Vec::new();
        let mut guard = self.anchored.lock();
        let st = guard.entry(session.clone()).or_default();
        let mut doubt = false;
        for (((anchor, known, plan), r), w) in plans.into_iter().zip(replies).zip(nodes.values()) {
            let (confirmed, epoch, tokens, found) = anchor_reply(&r, plan.rebind.len(), rw, &w.rw)?;
            self.rw_kept(session, rw, &w.rw, found, &mut rw_held);
            let confirmed = confirmed && known.as_deref() == Some(&*epoch);
            st.epochs.insert(anchor.clone(), epoch.clone());
            let sampled = &plan.rebind[plan.rebind.len() - plan.sampled..];
            let missed = sampled
                .iter()
                .zip(&tokens[tokens.len() - plan.sampled..])
                .any(|(_, t)| t.is_none());
            if confirmed && missed {
                // The anchor lives, yet a term it should vouch for is not held: trust
                // nothing bound to it until each term was checked.
                st.bound.retain(|_, b| b.anchor != anchor);
                doubt = true;
            }
            for (i, token, until) in plan.trusted {
                let name = names[i].name.clone();
                if confirmed {
                    out.push((
                        name,
                        Some(token),
                        left.min(until.saturating_duration_since(now)),
                    ));
                } else {
                    // The anchor ended (and began again): every term bound to it is over.
                    st.bound.remove(&name);
                    out.push((name, None, Duration::ZERO));
                }
            }
            for (&i, t) in plan.rebind.iter().zip(tokens) {
                let name = names[i].name.clone();
                match t {
                    Some(token) => st.bind(
                        &name,
                        Binding {
                            anchor: anchor.clone(),
                            epoch: epoch.clone(),
                            token,
                            until: sent + horizon,
                        },
                    ),
                    None => {
                        st.bound.remove(&name);
                    }
                }
                out.push((name, t, left));
            }
        }
        drop(guard);
        if doubt && again {
            return self.keep_alive_by_anchor(b, round, lease, false);
        }
        Ok(Some((out, rw_held)))
    }

    /// Cluster keep-alive, one `keep_alive_slot.lua` per slot (all pipelined), then slot by
    /// slot when the batch failed. Each extends (and unbinds) the session's terms there, and
    /// renews its read-write entries and answers its terms; a slot whose script failed lists
    /// none of its leases and terms (the engine counts them lost).
    fn keep_alive_by_slot(&self, b: &Base, round: &Round<'_>, left: Duration) -> Result<Outcomes> {
        let Round {
            session,
            names,
            rw,
            group_keys,
            remaining,
            answered,
            ..
        } = *round;
        let Some(left_ms) = slot_left(remaining, answered.elapsed()) else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut slots: BTreeMap<u16, SlotWork> = BTreeMap::new();
        for (i, n) in names.iter().enumerate() {
            slots.entry(n.slot).or_default().0.push(i);
        }
        for (i, n) in rw.iter().enumerate() {
            slots.entry(n.slot).or_default().1.push(i);
        }
        for g in group_keys {
            slots.entry(key_slot(g)).or_default().2.push(g.clone());
        }
        let slots: Vec<SlotWork> = slots.into_values().collect();
        let calls: Vec<ScriptCall<'_>> = slots
            .iter()
            .map(|(lk, rk, gk)| ScriptCall {
                script: &scripts().keep_alive_slot,
                keys: lk
                    .iter()
                    .map(|&i| b.keys.lease(names[i].name.as_str()))
                    .chain(rk.iter().map(|&i| b.keys.rw(rw[i].name.as_str())))
                    .chain(gk.iter().cloned())
                    .collect(),
                args: vec![
                    session.to_string(),
                    left_ms.to_string(),
                    lk.len().to_string(),
                    rk.len().to_string(),
                ],
            })
            .collect();
        let replies: Vec<Option<Reply>> = match b.scripting.eval_many(Role::KeepAlive, &calls) {
            Ok(r) => r.into_iter().map(Some).collect(),
            Err(e) => {
                // One node failing must not cost the leases on the others: slot by slot.
                log::warn!(
                    "batched keep-alive of session {session} failed ({}); slot by slot",
                    e.report()
                );
                calls
                    .iter()
                    .map(|c| {
                        let left = slot_left(remaining, answered.elapsed())?;
                        let mut args = c.args.clone();
                        args[1] = left.to_string();
                        b.eval(Role::KeepAlive, c.script, &c.keys, &args)
                            .map_err(|e| {
                                log::warn!(
                                    "keep-alive of a slot of session {session} failed: {}",
                                    e.report()
                                )
                            })
                            .ok()
                    })
                    .collect()
            }
        };
        let mut out = Vec::with_capacity(names.len());
        let mut rw_held = Vec::new();
        for ((lk, rk, _), r) in slots.into_iter().zip(replies) {
            // A slot whose script failed: its leases and read-write terms are not listed, so
            // the engine counts them lost (their names stay known, for the next keep-alive).
            let Some(r) = r else {
                continue;
            };
            // One token (0: not held) per lease key of the slot, then one `{has, mode,
            // token…}` per rw key.
            let a = array_of(OP, &r, lk.len() + rk.len())?;
            let found = rw_replies(&r, &a[lk.len()..], rw, &rk)?;
            for (&i, t) in lk.iter().zip(a) {
                let t = held_token(t).ok_or_else(|| bad_reply(OP, &r))?;
                out.push((names[i].name.clone(), t, left));
            }
            self.rw_kept(session, rw, &rk, found, &mut rw_held);
        }
        Ok((out, rw_held))
    }
}

/// A slot's share of a keep-alive: indices into the session's names and read-write locks,
/// and group keys.
type SlotWork = (Vec<usize>, Vec<usize>, Vec<String>);

impl Routed {
    /// Takes in what a node's script answered of the read-write locks `on` (indices into
    /// `rw`), one [`RwFound`] each: the terms it renewed go to `held`; a lock the session
    /// neither holds nor waits for is dropped from what this backend knows, unless noted since.
    fn rw_kept(
        &self,
        session: &SessionId,
        rw: &[RwName],
        on: &[usize],
        found: Vec<RwFound>,
        held: &mut Vec<HeldRw>,
    ) {
        for (&i, (has, terms)) in on.iter().zip(found) {
            if !has {
                self.rw.drop_if(session, &rw[i].name, Some(rw[i].stamp));
            }
            held.extend(terms);
        }
    }
}

/// What a keep-alive's node script found of one read-write lock: whether the session still
/// holds or waits for it, and the terms it holds there (renewed by that script).
type RwFound = (bool, Vec<HeldRw>);

/// Decodes the `{has (0|1), mode, token…}` of each read-write lock `on` (indices into `rw`)
/// in `items` of reply `r` (rw_extend's).
fn rw_replies(r: &Reply, items: &[Reply], rw: &[RwName], on: &[usize]) -> Result<Vec<RwFound>> {
    if items.len() != on.len() {
        return Err(bad_reply(OP, r));
    }
    items
        .iter()
        .zip(on)
        .map(|(x, &i)| match x.as_array() {
            Some([has, terms @ ..]) => {
                let has = rw_flag(has).ok_or_else(|| bad_reply(OP, r))?;
                let terms = rw_terms_in(OP, r, &rw[i].name, terms)?;
                if !has && !terms.is_empty() {
                    return Err(bad_reply(OP, r));
                }
                Ok((has, terms))
            }
            _ => Err(bad_reply(OP, r)),
        })
        .collect()
}

/// The session's leases and read-write locks (indices into `names` and `rw`) and group keys
/// grouped by the node serving them; `None` when the map does not place one of them.
fn by_node(
    map: &SlotMap,
    names: &[Indexed],
    rw: &[RwName],
    group_keys: &[String],
) -> Option<BTreeMap<usize, NodeWork>> {
    let mut nodes: BTreeMap<usize, NodeWork> = BTreeMap::new();
    for (i, n) in names.iter().enumerate() {
        let node = map.node_of(n.slot)?;
        nodes.entry(node).or_default().leases.push(i);
    }
    for (i, n) in rw.iter().enumerate() {
        let node = map.node_of(n.slot)?;
        nodes.entry(node).or_default().rw.push(i);
    }
    for g in group_keys {
        let node = map.node_of(key_slot(g))?;
        nodes.entry(node).or_default().groups.push(g.clone());
    }
    Some(nodes)
}

/// A token in a keep-alive reply: `Some(None)` for 0 (not held), `None` if not a token.
fn held_token(r: &Reply) -> Option<Option<Token>> {
    match r.as_int()? {
        0 => Some(None),
        t => Some(Some(token(OP, t).ok()?)),
    }
}

/// A read-write lock's flag in a keep-alive reply: whether the session still holds or waits
/// for it.
fn rw_flag(r: &Reply) -> Option<bool> {
    match r.as_int()? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// What `keep_alive_anchor.lua` answered: whether the anchor lived with the known epoch, its
/// epoch, a token (`None`: not held) per lease key and what it found of each read-write lock
/// key sent.
type AnchorReply = (bool, Arc<str>, Vec<Option<Token>>, Vec<RwFound>);

/// Decodes `keep_alive_anchor.lua`'s reply: `{confirmed (0|1), epoch, token…, {has, mode,
/// token…}…}` with one token (0: not held) per lease key of `n` and one `{has (1: still held
/// or waited for), then the terms there}` per read-write lock `on` (indices into `rw`).
fn anchor_reply(r: &Reply, n: usize, rw: &[RwName], on: &[usize]) -> Result<AnchorReply> {
    let a = array_of(OP, r, n + on.len() + 2)?;
    let confirmed = match a[0].as_int() {
        Some(0) => false,
        Some(1) => true,
        _ => return Err(bad_reply(OP, r)),
    };
    let epoch: Arc<str> = a[1]
        .as_str()
        .filter(|e| !e.is_empty())
        .ok_or_else(|| bad_reply(OP, r))?
        .into();
    let tokens = a[2..2 + n]
        .iter()
        .map(|t| held_token(t).ok_or_else(|| bad_reply(OP, r)))
        .collect::<Result<Vec<_>>>()?;
    let found = rw_replies(r, &a[2 + n..], rw, on)?;
    Ok((confirmed, epoch, tokens, found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spi::RwMode;

    #[test]
    fn slot_times_round_down() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        assert_eq!(slot_left(ms(5), us(3_500)), Some(1));
        assert_eq!(slot_left(ms(5000), us(1_999)), Some(4998));
        // Less than a whole ms left: nothing to grant (not 1 ms).
        assert_eq!(slot_left(ms(5), us(4_500)), None);
        assert_eq!(slot_left(ms(5), ms(5)), None);
        assert_eq!(slot_left(ms(5), ms(6)), None);
    }

    #[test]
    fn anchor_replies_list_the_read_write_terms_their_node_renewed() {
        let int = Reply::Int;
        let arr = Reply::Array;
        let data = |s: &str| Reply::Data(s.as_bytes().to_vec());
        let rw_name = |n: &str, slot| RwName {
            name: LeaseName::new(n).unwrap(),
            stamp: 1,
            slot,
        };
        let rw = [rw_name("a", 1), rw_name("b", 2), rw_name("c", 3)];
        let tok = |t| Token::new(t).unwrap();
        // One lease key, then locks a (read term), c (a place only) and nothing of b sent.
        let r = arr(vec![
            int(1),
            data("17.5"),
            int(4),
            arr(vec![int(1), data("read"), int(9)]),
            arr(vec![int(1)]),
        ]);
        let (confirmed, epoch, tokens, found) = anchor_reply(&r, 1, &rw, &[0, 2]).unwrap();
        assert!(confirmed);
        assert_eq!(&*epoch, "17.5");
        assert_eq!(tokens, vec![Some(tok(4))]);
        let held = HeldRw {
            name: rw[0].name.clone(),
            mode: RwMode::Read,
            token: tok(9),
        };
        assert_eq!(found, vec![(true, vec![held]), (true, vec![])]);
        let r = arr(vec![int(0), data("1.2"), arr(vec![int(0)])]);
        let (_, _, _, found) = anchor_reply(&r, 0, &rw, &[1]).unwrap();
        assert_eq!(found, vec![(false, vec![])]);
        for bad in [
            // A term listed while the lock is neither held nor waited for.
            arr(vec![
                int(0),
                data("1.2"),
                arr(vec![int(0), data("write"), int(3)]),
            ]),
            arr(vec![
                int(0),
                data("1.2"),
                arr(vec![int(1), data("both"), int(3)]),
            ]),
            arr(vec![
                int(0),
                data("1.2"),
                arr(vec![int(1), data("read"), int(0)]),
            ]),
            arr(vec![int(0), data("1.2"), arr(vec![int(1), data("read")])]),
            arr(vec![int(0), data("1.2"), arr(vec![int(2)])]),
            // The flag alone, as an earlier script answered.
            arr(vec![int(0), data("1.2"), int(1)]),
            arr(vec![int(0), data("1.2")]),
        ] {
            assert!(anchor_reply(&bad, 0, &rw, &[1]).is_err(), "{bad:?}");
        }
    }
}
