//! Routed by slot (`route_by_slot`, required on a Redis Cluster): every script call keeps to
//! one hash slot, so an operation first runs a script on its session's slot, then one per
//! slot of its other keys (an acquire of a session this backend knows live on a cluster
//! sends both at once, or the lease's first), and keeps the session's index sets itself. A new term is bound to
//! the session's anchor on the lease's node ([`super::anchors`]); only durations cross nodes
//! (see the module documentation's "Redis Cluster"). The keep-alive is in
//! `routed_keep_alive`.

use super::super::backend::{lease_ms, Base};
use super::super::keys::key_slot;
use super::super::reply::{
    acquired, array_of, bad_reply, expired, flag, group_in, lease_in, metadata_in, millis,
    session_call, session_in, strings, Acquired,
};
use super::super::scripting::{Reply, Role, ScriptCall};
use super::super::scripts::scripts;
use super::anchors;
use super::slot_map::SlotMaps;
use crate::error::{Error, Result};
use crate::types::{GroupName, LeaseName, Member, SessionId, Token};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the routed flavor keeps between calls.
#[derive(Default)]
pub(in super::super) struct Routed {
    /// Indexed names a keep-alive found not held, since when (dropped from the index once
    /// that lasted a lease).
    pub(super) stale: Mutex<HashMap<SessionId, HashMap<String, Instant>>>,
    /// Cluster: which node serves each slot, and when that was read.
    pub(super) slot_maps: SlotMaps,
    /// Per session, its index and its terms bound to anchors, as last seen.
    pub(super) anchored: Mutex<HashMap<SessionId, anchors::Anchored>>,
    /// Cluster keep-alives sent one script per node (for tests).
    pub(super) by_node: AtomicU64,
    /// Per session, its deadline and the read-write locks it holds or waits for.
    pub(in super::super) rw: super::rw_known::RwKnown,
    /// The names each session's last acquire through this backend found held by another (or
    /// queued behind others): its next one sends the lease call first (see
    /// [`Routed::acquire_lease_first`]).
    refused: Box<Mutex<HashSet<(SessionId, LeaseName)>>>,
}

/// How many refused acquires [`Routed`] remembers before it starts again.
const MAX_REFUSED: usize = 4096;

/// An acquire's call on the lease's slot, and the anchor its term is bound to.
struct LeaseCall {
    script: &'static super::super::scripting::LuaScript,
    keys: Vec<String>,
    args: Vec<String>,
    anchor: Option<String>,
}

/// Decodes the lease node's acquire reply: a new term bound to the anchor (`anchored`) ends
/// with the anchor's epoch; the node answers about the lease only, so a "gone" reply is not
/// one of its.
fn lease_reply(r: &Reply, anchored: bool, sid: &SessionId) -> Result<(Acquired, Option<String>)> {
    const OP: &str = "acquiring";
    let (r, epoch) = match r {
        Reply::Array(a) if a.len() == 5 && a[0].as_int() == Some(1) => match a[4].as_str() {
            Some(e) if !e.is_empty() && anchored => {
                (Reply::Array(a[..4].to_vec()), Some(e.to_owned()))
            }
            _ => return Err(bad_reply(OP, r)),
        },
        r => (r.clone(), None),
    };
    match acquired(OP, &r, sid)? {
        Acquired::Expired => Err(bad_reply(OP, &r)),
        other => Ok((other, epoch)),
    }
}

/// Lease, read-write lock and group keys of one slot.
type SlotKeys = (Vec<String>, Vec<String>, Vec<String>);

/// Groups lease, read-write lock and group keys by their hash slot.
fn by_slot(leases: &[String], rw: &[String], groups: &[String]) -> BTreeMap<u16, SlotKeys> {
    let mut m: BTreeMap<u16, SlotKeys> = BTreeMap::new();
    for k in leases {
        m.entry(key_slot(k)).or_default().0.push(k.clone());
    }
    for k in rw {
        m.entry(key_slot(k)).or_default().1.push(k.clone());
    }
    for k in groups {
        m.entry(key_slot(k)).or_default().2.push(k.clone());
    }
    m
}

impl Routed {
    /// How many cluster keep-alives went one script per node (not slot by slot).
    pub(super) fn keep_alives_by_node(&self) -> u64 {
        self.by_node.load(Ordering::Relaxed)
    }

    /// Whether `sid` is still live on its session's node, checked before a job call, and
    /// before a release or a leave of a session this backend knows no deadline of ahead (one
    /// more round trip): an expired session changes nothing, and a lease or membership node
    /// may still count it live for the cross-node delay.
    pub(super) fn live(&self, b: &Base, sid: &SessionId) -> Result<bool> {
        Ok(self.pttl(b, sid)?.is_some())
    }

    /// [`Self::live`], without the round trip while this backend knows a deadline of the
    /// session ahead (from its open or last keep-alive, no later than the server's).
    fn live_known(&self, b: &Base, sid: &SessionId) -> Result<bool> {
        if self.rw.known_live(sid, Instant::now()) {
            return Ok(true);
        }
        self.live(b, sid)
    }

    /// What `sid`'s session hash has left in ms (`PTTL`), or `None` once it is gone.
    pub(super) fn pttl(&self, b: &Base, sid: &SessionId) -> Result<Option<u64>> {
        let key = b.keys.session(sid);
        let r = b.scripting.command(Role::Other, &["PTTL", &key])?;
        match r.as_int() {
            // -2: no such key, -1: no expiry (not a session hash of this backend)
            Some(ms) if ms >= -2 => Ok(u64::try_from(ms).ok().filter(|&ms| ms > 0)),
            _ => Err(bad_reply("reading a session's time to live", &r)),
        }
    }

    /// Removes `member` from a session's `index` set (the scripts of a slot cannot); with
    /// the session's key, a removal counts as a change of its leases.
    fn unindex(
        &self,
        b: &Base,
        index: &str,
        member: &str,
        session: Option<&SessionId>,
    ) -> Result<()> {
        let mut keys = vec![index.to_owned()];
        keys.extend(session.map(|s| b.keys.session(s)));
        b.eval(Role::Other, &scripts().unindex, &keys, &[member.to_owned()])?;
        Ok(())
    }

    /// Forgets what this backend knew of a session (closed).
    pub(super) fn forget(&self, session: &SessionId) {
        self.stale.lock().remove(session);
        self.anchored.lock().remove(session);
        self.rw.forget(session);
    }

    /// Forgets what this backend knew of a session found expired (or gone) on its node; its
    /// read-write names learn it with their next call here.
    pub(super) fn forget_expired(&self, session: &SessionId) {
        self.stale.lock().remove(session);
        self.anchored.lock().remove(session);
        self.rw.expired(session);
    }

    /// The session call, then `acquire_lease.lua` on the lease's slot, or with `patience`
    /// (fair locks) `acquire_lease_queued.lua`; with `value`, `set_value.lua` after a grant.
    pub(super) fn acquire(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
        value: Option<&str>,
    ) -> Result<Acquired> {
        let r = self.acquire_lease(b, sid, name, patience)?;
        if let (Acquired::Term { token, .. }, Some(value)) = (&r, value) {
            b.set_value(sid, name, *token, value)?;
        }
        Ok(r)
    }

    /// [`Self::acquire`] without the value. On a cluster without `WAIT`, when this backend
    /// knows what the session has left, its lease and its lock-delay:
    /// [`Self::acquire_at_once`], or [`Self::acquire_lease_first`] after the session's last
    /// acquire of the name here was refused. Otherwise the session call first, then the
    /// lease call.
    fn acquire_lease(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
    ) -> Result<Acquired> {
        const OP: &str = "acquiring";
        let sent = Instant::now();
        if b.cfg.wait_replicas == 0 && b.scripting.clustered() {
            if let Some(known) = self.rw.for_acquire(sid, sent) {
                let key = (sid.clone(), name.clone());
                let refused = self.refused.lock().contains(&key);
                let r = if refused {
                    self.acquire_lease_first(b, sid, name, patience, sent, known)
                } else {
                    self.acquire_at_once(b, sid, name, patience, sent, known)
                };
                let mut hints = self.refused.lock();
                match &r {
                    Ok(Acquired::Held(_) | Acquired::Queued { .. }) => {
                        if !hints.contains(&key) {
                            if hints.len() >= MAX_REFUSED {
                                hints.clear();
                            }
                            hints.insert(key);
                        }
                    }
                    _ => {
                        hints.remove(&key);
                    }
                }
                return r;
            }
        }
        let r = b.eval(
            Role::Other,
            &scripts().acquire_session,
            &[b.keys.session(sid), b.keys.leases_index(sid)],
            &[name.to_string()],
        )?;
        let Some((left, lease, delay)) = session_call(OP, &r)? else {
            self.forget_expired(sid);
            return Ok(Acquired::Expired);
        };
        let left = Duration::from_millis(left);
        if sent.elapsed() >= left {
            return Err(Error::Timeout {
                operation: "acquiring (the session's time ran out before the lease call)",
                after: left,
                source: None,
            });
        }
        let call = self.lease_call(b, sid, name, patience, lease, delay);
        let (r, acked) = if b.cfg.wait_replicas == 0 {
            (
                b.eval(Role::Other, call.script, &call.keys, &call.args)?,
                None,
            )
        } else {
            // `WAIT` on the lease's master, right after the script (one pipeline there).
            let new_term = |r: &Reply| {
                matches!(r.as_array(), Some(a) if a.len() >= 4
                    && a[0].as_int() == Some(1)
                    && flag(OP, &a[3]).unwrap_or(false))
            };
            b.scripting.eval_then_wait(
                call.script,
                &call.keys,
                &call.args,
                &new_term,
                b.cfg.wait_replicas,
                b.wait_timeout(),
            )?
        };
        let (r, epoch) = lease_reply(&r, call.anchor.is_some(), sid)?;
        if let (Some(acked), Acquired::Term { token, .. }) = (acked, &r) {
            if acked < b.cfg.wait_replicas {
                let released = self.release_term(b, sid, name, *token);
                return Err(b.unacknowledged(name, *token, acked, released));
            }
        }
        self.lease_answered(b, sid, name, sent, left, call.anchor, r, epoch)
    }

    /// One round trip (a cluster whose session this backend knows live, without `WAIT`): the
    /// session call and the lease call as one batch, pipelined to both nodes at once. The
    /// lease call goes with the lease and lock-delay this backend knows (`known`, with what the
    /// session has left by the deadline of its open or last keep-alive, no later than the
    /// server's); the session call indexes the name as before and judges the session live on
    /// its own node in the same round trip. A session found gone there (closed or deleted
    /// behind this backend) undoes a new term and answers [`Acquired::Expired`]; the late rule
    /// counts from the later of the two deadlines (both no later than the server's).
    fn acquire_at_once(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
        sent: Instant,
        known: (Duration, Duration, u64),
    ) -> Result<Acquired> {
        const OP: &str = "acquiring";
        let (left, lease, delay) = known;
        let call = self.lease_call(b, sid, name, patience, lease_ms(lease), delay);
        let calls = [
            ScriptCall {
                script: &scripts().acquire_session,
                keys: vec![b.keys.session(sid), b.keys.leases_index(sid)],
                args: vec![name.to_string()],
            },
            ScriptCall {
                script: call.script,
                keys: call.keys,
                args: call.args,
            },
        ];
        let replies = match b.scripting.eval_many(Role::Other, &calls) {
            Ok(r) => r,
            Err(e) => {
                // The lease call may have granted a term the session call did not index: the
                // session call again, so that the index has the name as after a lease call
                // failed on the path with the session call first.
                let [index, _] = &calls;
                if let Err(e) = b.eval(Role::Other, index.script, &index.keys, &index.args) {
                    log::warn!(
                        "indexing {name:?} after a failed acquire failed: {}",
                        e.report()
                    );
                }
                return Err(e);
            }
        };
        let [session_r, lease_r] = replies.as_slice() else {
            return Err(bad_reply(OP, &Reply::Array(replies)));
        };
        let session = session_call(OP, session_r)?;
        let (r, epoch) = lease_reply(lease_r, call.anchor.is_some(), sid)?;
        let Some((server_left, _, _)) = session else {
            // Gone on its own node: a new term may outlast it, so it is undone.
            if let Acquired::Term {
                token, new: true, ..
            } = r
            {
                if let Err(e) = self.release_term(b, sid, name, token) {
                    log::warn!(
                        "releasing the term {token} of {name:?} of an ended session failed: {}",
                        e.report()
                    );
                }
            }
            if patience.is_some() {
                // A place the lease call may have queued would wait for nothing.
                if let Err(e) = b.leave_queue(sid, name) {
                    log::warn!(
                        "leaving the queue of {name:?} of an ended session failed: {}",
                        e.report()
                    );
                }
            }
            self.forget_expired(sid);
            return Ok(Acquired::Expired);
        };
        let left = left.max(Duration::from_millis(server_left));
        self.lease_answered(b, sid, name, sent, left, call.anchor, r, epoch)
    }

    /// One round trip while the name stays held (a waiter polling it: this session's last
    /// acquire here found it held): the lease call alone, with what this backend knows as in
    /// [`Self::acquire_at_once`]; a name not granted is not indexed (nothing to take out
    /// again). A grant is then indexed by the session call (a second round trip), which also
    /// judges the session live: found gone, the new term is undone; the late rule counts from
    /// the later of the known deadline and the session call's. Between the two calls the
    /// term is not in the index, as with a keep-alive whose session call ran just before an
    /// acquire's: the grant kept its anchor a full lease, and the next keep-alive finds it.
    fn acquire_lease_first(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
        sent: Instant,
        known: (Duration, Duration, u64),
    ) -> Result<Acquired> {
        const OP: &str = "acquiring";
        let (left, lease, delay) = known;
        let call = self.lease_call(b, sid, name, patience, lease_ms(lease), delay);
        let r = b.eval(Role::Other, call.script, &call.keys, &call.args)?;
        let (r, epoch) = lease_reply(&r, call.anchor.is_some(), sid)?;
        let Acquired::Term { token, new, .. } = r else {
            return Ok(r);
        };
        let indexed = Instant::now();
        let index = b.eval(
            Role::Other,
            &scripts().acquire_session,
            &[b.keys.session(sid), b.keys.leases_index(sid)],
            &[name.to_string()],
        );
        let undo = |why: &str| {
            if new {
                if let Err(e) = self.release_term(b, sid, name, token) {
                    log::warn!(
                        "releasing the term {token} of {name:?} ({why}) failed: {}",
                        e.report()
                    );
                }
            }
        };
        let session = match index.and_then(|r| session_call(OP, &r)) {
            Ok(s) => s,
            Err(e) => {
                // Not indexed: a keep-alive would not find the term.
                undo("not indexed");
                return Err(e);
            }
        };
        let Some((server_left, _, _)) = session else {
            undo("its session ended");
            self.forget_expired(sid);
            return Ok(Acquired::Expired);
        };
        let deadline = (sent + left).max(indexed + Duration::from_millis(server_left));
        let left = deadline.saturating_duration_since(sent);
        self.lease_answered(b, sid, name, sent, left, call.anchor, r, epoch)
    }

    /// The lease call of an acquire for `sid` with its `lease` and lock-delay `delay` (ms):
    /// `acquire_lease.lua` on the lease's slot, or with `patience` (fair locks)
    /// `acquire_lease_queued.lua`, bound to the session's anchor on the lease's node by the
    /// slot map last read (none before the first keep-alive read one: the term is then bound
    /// by that keep-alive).
    fn lease_call(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        patience: Option<Duration>,
        lease: u64,
        delay: u64,
    ) -> LeaseCall {
        let lease_key = b.keys.lease(name.as_str());
        let anchor = self
            .slot_maps
            .cached(&*b.scripting)
            .and_then(|m| Some(m.tags.get(m.node_of(key_slot(&lease_key))?)?.clone()))
            .map(|tag| b.keys.anchor(&tag, sid));
        let horizon = lease.saturating_mul(u64::from(anchors::HORIZON_LEASES));
        let mut keys = vec![lease_key];
        let mut args = vec![
            sid.to_string(),
            lease.to_string(),
            b.keys.session_prefix(),
            anchor.clone().unwrap_or_default(),
            horizon.to_string(),
        ];
        let script = match patience {
            None => &scripts().acquire_lease,
            Some(p) => {
                keys.push(b.keys.queue(name.as_str()));
                keys.push(b.keys.queue_deadlines(name.as_str()));
                args.push(lease_ms(p).to_string());
                &scripts().acquire_lease_queued
            }
        };
        // The session's lock-delay, kept with the term (and the anchor's epoch).
        args.push(delay.to_string());
        LeaseCall {
            script,
            keys,
            args,
            anchor,
        }
    }

    /// What an acquire does once the lease's node answered `r` (with the anchor's `epoch` of a
    /// new bound term), `left` being what the session had from `sent`: a term answered late is
    /// undone (when new) and fails with [`Error::Timeout`]; a name not held leaves the index.
    #[allow(clippy::too_many_arguments)]
    fn lease_answered(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        sent: Instant,
        left: Duration,
        anchor: Option<String>,
        r: Acquired,
        epoch: Option<String>,
    ) -> Result<Acquired> {
        match r {
            Acquired::Term { token, new, .. } if sent.elapsed() > left => {
                if new {
                    if let Err(e) = self.release_term(b, sid, name, token) {
                        log::warn!(
                            "releasing the late term {token} of {name:?} failed: {}",
                            e.report()
                        );
                    }
                }
                Err(Error::Timeout {
                    operation: "acquiring (the lease call answered after the session's time)",
                    after: left,
                    source: None,
                })
            }
            Acquired::Term {
                token,
                remaining,
                new,
            } => {
                // A term of the name now: whatever a keep-alive found before is history.
                if let Some(m) = self.stale.lock().get_mut(sid) {
                    m.remove(name.as_str());
                }
                // The anchor's epoch only: the term itself is trusted once a keep-alive bound
                // it again (one rebind per new term). A binding recorded here could outlive
                // a slot-by-slot keep-alive running meanwhile, which unbinds it on the server.
                if let (Some(anchor), Some(epoch)) = (anchor, epoch) {
                    let mut st = self.anchored.lock();
                    let st = st.entry(sid.clone()).or_default();
                    st.epochs.insert(anchor.into(), epoch.into());
                }
                // The term is adopted with the session's remaining time (a full lease covers
                // a new term), or with what the lease node has left of a term the session
                // already held, whichever is less.
                Ok(Acquired::Term {
                    token,
                    remaining: remaining.min(left),
                    new,
                })
            }
            held => {
                self.unindex(b, &b.keys.leases_index(sid), name.as_str(), Some(sid))?;
                Ok(held)
            }
        }
    }

    /// The session check (none while this backend knows a deadline of the session ahead),
    /// then the release on the term's node.
    pub(super) fn release(
        &self,
        b: &Base,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
    ) -> Result<bool> {
        if !self.live_known(b, session)? {
            return Ok(false);
        }
        self.release_term(b, session, name, token)
    }

    /// Releases a term on its node, without the session check (also the undo of a late or
    /// unacknowledged grant, whose session may be gone).
    fn release_term(
        &self,
        b: &Base,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
    ) -> Result<bool> {
        let index = b.keys.leases_index(session);
        let freed = b.release_script(&[b.keys.lease(name.as_str())], session, name, token)?;
        if let Some(s) = self.anchored.lock().get_mut(session) {
            s.bound.remove(name);
        }
        if freed {
            self.unindex(b, &index, name.as_str(), Some(session))?;
        }
        Ok(freed)
    }

    /// The session call, then `join_group.lua` on the group's slot.
    pub(super) fn join(&self, b: &Base, session: &SessionId, group: &GroupName) -> Result<()> {
        const OP: &str = "joining a group";
        let gkey = b.keys.group(group.as_str());
        let sent = Instant::now();
        let r = b.eval(
            Role::Other,
            &scripts().acquire_session,
            &[b.keys.session(session), b.keys.groups_index(session)],
            &[group.to_string()],
        )?;
        let Some((left, lease, _)) = session_call(OP, &r)? else {
            return Err(expired(session));
        };
        let left = Duration::from_millis(left);
        if sent.elapsed() >= left {
            return Err(Error::Timeout {
                operation: "joining (the session's time ran out before the group call)",
                after: left,
                source: None,
            });
        }
        let created = flag(
            OP,
            &b.eval(
                Role::Other,
                &scripts().join_group,
                std::slice::from_ref(&gkey),
                &[session.to_string(), lease.to_string()],
            )?,
        )?;
        if sent.elapsed() > left {
            // Leave only a membership this call created: one from an earlier join stays.
            if created {
                if let Err(e) = self.leave_group(b, session, group) {
                    log::warn!("leaving {group:?} after a late join failed: {}", e.report());
                }
            }
            return Err(Error::Timeout {
                operation: "joining (the group call answered after the session's time)",
                after: left,
                source: None,
            });
        }
        Ok(())
    }

    /// The session check (none while this backend knows a deadline of the session ahead),
    /// then the leave on the group's node.
    pub(super) fn leave(&self, b: &Base, session: &SessionId, group: &GroupName) -> Result<bool> {
        if !self.live_known(b, session)? {
            return Ok(false);
        }
        self.leave_group(b, session, group)
    }

    /// Leaves a group on its node, without the session check (also the undo of a late
    /// join).
    fn leave_group(&self, b: &Base, session: &SessionId, group: &GroupName) -> Result<bool> {
        let index = b.keys.groups_index(session);
        let was = b.leave_script(&[b.keys.group(group.as_str())], session, group)?;
        self.unindex(b, &index, group.as_str(), None)?;
        Ok(was)
    }

    /// The member ids on the group's node, then each one's metadata on its session's slot
    /// (a session that ended meanwhile is skipped).
    pub(super) fn members(&self, b: &Base, group: &GroupName) -> Result<Vec<Member>> {
        const OP: &str = "reading members";
        let (r, items) = b.members_script(group, false)?;
        let ids = items
            .iter()
            .map(|id| session_in(OP, &r, id))
            .collect::<Result<Vec<_>>>()?;
        let mut out = Vec::new();
        for sid in ids {
            let m = b.eval(
                Role::Other,
                &scripts().session_metadata,
                &[b.keys.session(&sid)],
                &[],
            )?;
            // Nil: the session ended meanwhile.
            match &m {
                Reply::Nil => {}
                Reply::Data(_) => {
                    let text = m.as_str().ok_or_else(|| bad_reply(OP, &m))?;
                    out.push(Member {
                        session: sid,
                        metadata: metadata_in(OP, &m, text)?,
                    });
                }
                _ => return Err(bad_reply(OP, &m)),
            }
        }
        Ok(out)
    }

    /// `close_session.lua` on the session's slot (it answers the session's leases and
    /// groups, and whether it was live), then one `close_slot.lua` per slot of those, as one
    /// batch (an expired session's read-write terms keep their lock-delay), then the index.
    pub(super) fn close(&self, b: &Base, session: &SessionId) -> Result<()> {
        const OP: &str = "closing a session";
        let index = b.keys.session_keys(session);
        // Every read-write lock it holds or waits for, live or not: ending them is harmless.
        let rw_keys: Vec<String> = self
            .rw
            .names(session)
            .iter()
            .map(|(n, _)| b.keys.rw(n.as_str()))
            .collect();
        self.forget(session);
        let r = b.eval(Role::Other, &scripts().close_session, &index, &[])?;
        let a = array_of(OP, &r, 3)?;
        let live = match a[2].as_int() {
            Some(0) => "0",
            Some(1) => "1",
            _ => return Err(bad_reply(OP, &r)),
        };
        let names = strings(OP, &a[0])?;
        let groups = strings(OP, &a[1])?;
        for n in &names {
            lease_in(OP, &r, n)?;
        }
        for g in &groups {
            group_in(OP, &r, g)?;
        }
        let lease_keys: Vec<String> = names.iter().map(|n| b.keys.lease(n)).collect();
        let group_keys: Vec<String> = groups.iter().map(|g| b.keys.group(g)).collect();
        let calls: Vec<ScriptCall<'_>> = by_slot(&lease_keys, &rw_keys, &group_keys)
            .into_values()
            .map(|(lk, rk, gk)| ScriptCall {
                script: &scripts().close_slot,
                args: vec![
                    session.to_string(),
                    lk.len().to_string(),
                    rk.len().to_string(),
                    live.to_owned(),
                ],
                keys: lk.into_iter().chain(rk).chain(gk).collect(),
            })
            .collect();
        b.scripting.eval_many(Role::Other, &calls)?;
        b.scripting
            .command(Role::Other, &["DEL", &index[1], &index[2]])?;
        Ok(())
    }
}

impl Routed {
    /// What `sid` has left and its lock-delay in ms, read from its session hash
    /// (`session_ttl.lua`: both are kept, the deadline from `sent`); `SessionExpired` (and
    /// the session forgotten) when it is gone.
    pub(in super::super) fn session_left(
        &self,
        b: &Base,
        sid: &SessionId,
        sent: Instant,
    ) -> Result<(Duration, u64)> {
        const OP: &str = "reading a session's time to live";
        let r = b.eval(
            Role::Other,
            &scripts().session_ttl,
            &[b.keys.session(sid)],
            &[],
        )?;
        let a = array_of(OP, &r, 2)?;
        let (Some(ms), Some(delay)) = (a[0].as_int(), a[1].as_int()) else {
            return Err(bad_reply(OP, &r));
        };
        let delay = u64::try_from(delay).map_err(|_| bad_reply(OP, &r))?;
        match ms {
            // -2: no such key, -1: no expiry (not a session hash of this backend)
            ms if ms > 0 => {
                let left = millis(OP, &r, ms)?;
                self.rw.renewed(sid, sent + left, None);
                self.rw.delay_known(sid, delay);
                Ok((left, delay))
            }
            -2..=0 => {
                self.forget_expired(sid);
                Err(expired(sid))
            }
            _ => Err(bad_reply(OP, &r)),
        }
    }
}
