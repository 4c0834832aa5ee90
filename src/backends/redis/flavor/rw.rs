//! Read-write locks on both flavors (see "Read-write locks" in the module documentation): one
//! script an operation on the lock's slot.
//!
//! One node: the script reads the session hash, binds a new entry to it and keeps the
//! session's rw index (for close). Routed: the script cannot read the session hash (another
//! slot), so an entry ends at its own expiry, set from what this backend knows the session has
//! left ([`RwKnown`]: the deadline of its last open or keep-alive, an `Instant` no later than
//! the server's), and each keep-alive moves it on in the scripts it sends to each node anyway.

use super::super::backend::{lease_ms, Base};
use super::super::reply::{array_of, bad_reply, expired, gone, int_at, millis, session_in, token};
use super::super::scripting::{Reply, Role};
use super::super::scripts::scripts;
use super::routed::Routed;
use super::Flavor;
use crate::error::{Error, Result};
use crate::spi::{RwAcquire, RwDelayed, RwMode};
use crate::types::{LeaseName, SessionId, Term, Token};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const OP: &str = "acquiring a read-write lock";

/// What `rw_acquire.lua` answered.
enum RwReply {
    /// The session's own session hash is gone (one node).
    Expired,
    /// The session holds a term of the mode asked; `new` for a new term.
    Granted {
        token: Token,
        remaining: Duration,
        new: bool,
    },
    /// Not granted now; `has`: the session still holds or waits for the name.
    Busy { busy: RwAcquire, has: bool },
}

fn count(r: &Reply, x: &Reply) -> Result<usize> {
    x.as_int()
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| bad_reply(OP, r))
}

fn bit(op: &'static str, r: &Reply, x: &Reply) -> Result<bool> {
    match x.as_int() {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(bad_reply(op, r)),
    }
}

/// Decodes `{-1}`, `{1, token, remaining, new}` or `{0, writer, readers, waiting, has}` (the
/// writer may be the caller: a session holding the write term that asks to read).
fn rw_reply(r: &Reply) -> Result<RwReply> {
    if gone(r) {
        return Ok(RwReply::Expired);
    }
    match r.as_array() {
        Some([tag, t, left, new]) if tag.as_int() == Some(1) => Ok(RwReply::Granted {
            token: token(OP, t.as_int().ok_or_else(|| bad_reply(OP, r))?)?,
            remaining: millis(OP, r, left.as_int().ok_or_else(|| bad_reply(OP, r))?)?,
            new: bit(OP, r, new)?,
        }),
        Some([tag, writer, readers, waiting, has]) if tag.as_int() == Some(0) => {
            let writer = match writer.as_str().ok_or_else(|| bad_reply(OP, r))? {
                "" => None,
                w => Some(session_in(OP, r, w)?),
            };
            Ok(RwReply::Busy {
                busy: RwAcquire::Busy {
                    writer,
                    readers: count(r, readers)?,
                    writers_waiting: count(r, waiting)?,
                },
                has: bit(OP, r, has)?,
            })
        }
        _ => Err(bad_reply(OP, r)),
    }
}

/// Decodes `{done (0|1), has (0|1)}` of a release or a leave.
fn done_has(op: &'static str, r: &Reply) -> Result<(bool, bool)> {
    let a = array_of(op, r, 2)?;
    Ok((bit(op, r, &a[0])?, bit(op, r, &a[1])?))
}

/// Routed: what this backend knows of each session for its read-write locks: a deadline no
/// later than the session's on the server (from its open and keep-alives), and the names it
/// holds or waits for, each with the stamp of the call that last found it so (a keep-alive or
/// release that finds a name gone drops it only if no call found it since).
#[derive(Default)]
pub(in super::super) struct RwKnown {
    sessions: Mutex<HashMap<SessionId, KnownSession>>,
    stamps: AtomicU64,
    /// The size past which sessions whose deadline passed are dropped.
    cap: AtomicU64,
    /// Per name, sessions found expired here that held or waited for it, each until their
    /// entries there ended on their own: the next read-write call on the name sends them, and
    /// its script ends their places and terms (a term with a lock-delay then starts it).
    gone: Mutex<HashMap<LeaseName, Vec<(SessionId, Instant)>>>,
}

#[derive(Default)]
struct KnownSession {
    deadline: Option<Instant>,
    /// The lease its last open or keep-alive asked for.
    lease: Option<Duration>,
    /// Its lock-delay in ms, as its open or last keep-alive answered.
    delay: Option<u64>,
    names: HashMap<LeaseName, u64>,
}

/// The fewest sessions [`RwKnown`] keeps before it drops those whose deadline passed.
const KNOWN_CAP: u64 = 1024;

impl RwKnown {
    /// What `sid` has left at `now` by the deadline known, if it is ahead, with the lease it
    /// asked for last and its lock-delay in ms (each if known).
    fn left(
        &self,
        sid: &SessionId,
        now: Instant,
    ) -> Option<(Duration, Option<Duration>, Option<u64>)> {
        let m = self.sessions.lock();
        let s = m.get(sid)?;
        let left = s.deadline?.saturating_duration_since(now);
        (left.as_millis() > 0).then_some((left, s.lease, s.delay))
    }

    /// What `sid` has left at `now` by the deadline known, if it is ahead, with the lease its
    /// open or last keep-alive asked for and its lock-delay in ms, when both are known: what a
    /// routed lease acquire needs to go without a session call first.
    pub(super) fn for_acquire(
        &self,
        sid: &SessionId,
        now: Instant,
    ) -> Option<(Duration, Duration, u64)> {
        let m = self.sessions.lock();
        let s = m.get(sid)?;
        let left = s.deadline?.saturating_duration_since(now);
        (left.as_millis() > 0).then_some((left, s.lease?, s.delay?))
    }

    /// Whether this backend knows a deadline of `sid` ahead at `now` (no later than the
    /// server's): the session is live unless it was closed through another backend.
    pub(super) fn known_live(&self, sid: &SessionId, now: Instant) -> bool {
        self.left(sid, now).is_some()
    }

    /// `sid`'s lock-delay is `ms` (0: none), as its open or a keep-alive answered.
    pub(super) fn delay_known(&self, sid: &SessionId, ms: u64) {
        if let Some(s) = self.sessions.lock().get_mut(sid) {
            s.delay = Some(ms);
        }
    }

    /// `sid` lives at least until `deadline` (kept if a later one is known); `lease`, when
    /// given, is what its open or keep-alive asked for.
    pub(super) fn renewed(&self, sid: &SessionId, deadline: Instant, lease: Option<Duration>) {
        let mut m = self.sessions.lock();
        let s = m.entry(sid.clone()).or_default();
        if s.deadline.is_none_or(|d| d < deadline) {
            s.deadline = Some(deadline);
        }
        if lease.is_some() {
            s.lease = lease;
        }
        let cap = self.cap.load(Ordering::Relaxed).max(KNOWN_CAP);
        if m.len() as u64 > cap {
            // Sessions this backend opened but never closed nor saw expire (their process
            // dropped them): their entries ended on the servers by their own expiry.
            let now = Instant::now();
            m.retain(|_, s| s.deadline.is_some_and(|d| d > now));
            self.cap
                .store((m.len() as u64 * 2).max(KNOWN_CAP), Ordering::Relaxed);
        }
    }

    /// `sid` holds or waits for `name` now (or may: an acquire is under way): a new stamp,
    /// returned.
    fn note(&self, sid: &SessionId, name: &LeaseName) -> u64 {
        let stamp = self.stamps.fetch_add(1, Ordering::Relaxed) + 1;
        let mut m = self.sessions.lock();
        m.entry(sid.clone())
            .or_default()
            .names
            .insert(name.clone(), stamp);
        stamp
    }

    /// The stamp of `name` of `sid`, if indexed.
    pub(super) fn stamp(&self, sid: &SessionId, name: &LeaseName) -> Option<u64> {
        self.sessions.lock().get(sid)?.names.get(name).copied()
    }

    /// Drops `name` of `sid`, found neither held nor waited for, unless a call found it so
    /// since `stamp` was read.
    pub(super) fn drop_if(&self, sid: &SessionId, name: &LeaseName, stamp: Option<u64>) {
        let mut m = self.sessions.lock();
        if let Some(s) = m.get_mut(sid) {
            if s.names.get(name).copied() == stamp {
                s.names.remove(name);
            }
        }
    }

    /// The names `sid` holds or waits for, with their stamps.
    pub(super) fn names(&self, sid: &SessionId) -> Vec<(LeaseName, u64)> {
        match self.sessions.lock().get(sid) {
            Some(s) => s.names.iter().map(|(n, t)| (n.clone(), *t)).collect(),
            None => Vec::new(),
        }
    }

    /// Forgets `sid` (closed or expired); the names it held or waited for.
    pub(super) fn forget(&self, sid: &SessionId) -> Vec<LeaseName> {
        self.sessions
            .lock()
            .remove(sid)
            .map(|s| s.names.into_keys().collect())
            .unwrap_or_default()
    }

    /// Forgets `sid`, found expired on its session's node: the names it held or waited for
    /// learn it with their next read-write call here (see [`Self::gone_for`]).
    pub(super) fn expired(&self, sid: &SessionId) {
        let Some(s) = self.sessions.lock().remove(sid) else {
            return;
        };
        // Its entries end on their own within a lease of its last renewal or grant.
        let until = Instant::now() + s.lease.unwrap_or(GONE_FOR).max(GONE_FOR);
        let mut gone = self.gone.lock();
        if gone.values().map(Vec::len).sum::<usize>() >= GONE_CAP {
            let now = Instant::now();
            gone.retain(|_, v| {
                v.retain(|(_, u)| *u > now);
                !v.is_empty()
            });
            if gone.values().map(Vec::len).sum::<usize>() >= GONE_CAP {
                // Best effort: those entries end on their own.
                gone.clear();
            }
        }
        for name in s.names.into_keys() {
            gone.entry(name).or_default().push((sid.clone(), until));
        }
    }

    /// The sessions found expired here that may still have entries in `name`.
    pub(super) fn gone_for(&self, name: &LeaseName) -> Vec<String> {
        let mut gone = self.gone.lock();
        let Some(v) = gone.get_mut(name) else {
            return Vec::new();
        };
        let now = Instant::now();
        v.retain(|(_, u)| *u > now);
        let out = v.iter().map(|(s, _)| s.to_string()).collect();
        if v.is_empty() {
            gone.remove(name);
        }
        out
    }

    /// A script on `name` ended the entries of the sessions `sent` ([`Self::gone_for`]).
    pub(super) fn gone_ended(&self, name: &LeaseName, sent: &[String]) {
        if sent.is_empty() {
            return;
        }
        let mut gone = self.gone.lock();
        if let Some(v) = gone.get_mut(name) {
            v.retain(|(s, _)| !sent.iter().any(|x| x == s.as_str()));
            if v.is_empty() {
                gone.remove(name);
            }
        }
    }
}

impl RwKnown {
    /// Runs a script on `name` with `args` followed by the sessions found expired here that
    /// may still have entries there ([`Self::gone_for`]); once it ran, their entries there
    /// are ended ([`Self::gone_ended`]).
    fn sending_gone<T>(
        &self,
        name: &LeaseName,
        mut args: Vec<String>,
        script: impl FnOnce(&[String]) -> Result<T>,
    ) -> Result<T> {
        let at = args.len();
        args.extend(self.gone_for(name));
        let r = script(&args)?;
        self.gone_ended(name, &args[at..]);
        Ok(r)
    }
}

/// How long at least a session found expired is sent with the names it held.
const GONE_FOR: Duration = Duration::from_secs(60);

/// The most sessions found expired kept for their names.
const GONE_CAP: usize = 4096;

/// The term of a grant.
fn term(name: &LeaseName, token: Token, remaining: Duration) -> RwAcquire {
    RwAcquire::Acquired(Term {
        name: name.clone(),
        token,
        remaining,
    })
}

impl Flavor {
    /// A session was opened for `lease` with a lock-delay of `delay_ms`: it lives at least
    /// until `deadline` (routed: read-write and lease acquires count on that).
    pub(in super::super) fn session_opened(
        &self,
        sid: &SessionId,
        deadline: Instant,
        lease: Option<Duration>,
        delay_ms: u64,
    ) {
        if let Flavor::Routed(f) = self {
            f.rw.renewed(sid, deadline, lease);
            f.rw.delay_known(sid, delay_ms);
        }
    }

    /// The arguments of `rw_state.lua` on `name`: the session key prefix, then (routed) the
    /// sessions found expired here that may still have entries there.
    pub(in super::super) fn rw_state_args(&self, b: &Base, name: &LeaseName) -> Vec<String> {
        let mut args = vec![b.keys.session_prefix()];
        if let Flavor::Routed(f) = self {
            args.extend(f.rw.gone_for(name));
        }
        args
    }

    /// One attempt at the read-write lock `name` (one script; routed, one more call first,
    /// `session_ttl.lua`, when this backend knows no deadline of the session ahead).
    pub(in super::super) fn acquire_rw(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        let mut args = vec![
            sid.to_string(),
            mode.as_str().to_owned(),
            patience_ms(patience).to_string(),
            b.keys.session_prefix(),
        ];
        let rw = b.keys.rw(name.as_str());
        match self {
            Flavor::OneNode(_) => {
                let keys = [rw, b.keys.session(sid), b.keys.rw_index(sid)];
                match rw_call(b, sid, name, &keys, &args)? {
                    RwReply::Expired => Err(expired(sid)),
                    RwReply::Granted {
                        token, remaining, ..
                    } => Ok(term(name, token, remaining)),
                    RwReply::Busy { busy, .. } => Ok(busy),
                }
            }
            Flavor::Routed(f) => {
                let sent = Instant::now();
                let (left, lease, delay) = match f.rw.left(sid, sent) {
                    Some((left, lease, Some(delay))) => (left, lease, delay),
                    known => {
                        let (left, delay) = f.session_left(b, sid, sent)?;
                        (left, known.and_then(|k| k.1), delay)
                    }
                };
                // A new entry gets a full lease on the lock's node (what the session has left
                // when its lease is not known): it then outlasts the deadline of every
                // keep-alive sent before the script ran, even one whose renewal missed it.
                // A new place ends with the session as known here, and a term with a
                // lock-delay counts as ended from then on for the other sessions.
                args.push(lease_ms(lease.unwrap_or(left).max(left)).to_string());
                args.push(delay.to_string());
                args.push(known_ms(left).to_string());
                // Noted before the call: a keep-alive running meanwhile renews it.
                let pre = f.rw.note(sid, name);
                let r =
                    f.rw.sending_gone(name, args, |args| rw_call(b, sid, name, &[rw], args))?;
                match r {
                    // The lock's node answers about the lock only.
                    RwReply::Expired => Err(bad_reply(OP, &Reply::Nil)),
                    RwReply::Granted { token, new, .. } if sent.elapsed() > left => {
                        // The entry may outlast its session: undone, as a late lease grant.
                        if new {
                            if let Err(e) = f.release_rw_term(b, sid, name, mode, token) {
                                log::warn!(
                                    "releasing the late {} term {token} of {name:?} failed: {}",
                                    mode.as_str(),
                                    e.report()
                                );
                            }
                        }
                        Err(Error::Timeout {
                            operation: "acquiring a read-write lock (the lock call answered after the session's time)",
                            after: left,
                            source: None,
                        })
                    }
                    RwReply::Granted { token, .. } => {
                        // Noted again: a keep-alive whose renewal ran before the script (and
                        // found nothing) may have dropped the first note.
                        f.rw.note(sid, name);
                        Ok(term(name, token, left))
                    }
                    RwReply::Busy { busy, has } => {
                        if has {
                            f.rw.note(sid, name);
                        } else {
                            f.rw.drop_if(sid, name, Some(pre));
                        }
                        Ok(busy)
                    }
                }
            }
        }
    }

    /// Ends `sid`'s `mode` term of `name` with `token` (one script; routed, `session_ttl.lua`
    /// first when this backend knows no deadline of the session ahead).
    pub(in super::super) fn release_rw(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        match self {
            Flavor::OneNode(_) => {
                let keys = [
                    b.keys.rw(name.as_str()),
                    b.keys.session(sid),
                    b.keys.rw_index(sid),
                ];
                let r = b.eval(
                    Role::Other,
                    &scripts().rw_release,
                    &keys,
                    &release_args(b, sid, mode, token),
                )?;
                Ok(done_has("releasing a read-write lock", &r)?.0)
            }
            Flavor::Routed(f) => {
                let now = Instant::now();
                if f.rw.left(sid, now).is_none() {
                    match f.session_left(b, sid, now) {
                        Err(Error::SessionExpired { .. }) => return Ok(false),
                        other => drop(other?),
                    }
                }
                f.release_rw_term(b, sid, name, mode, token)
            }
        }
    }

    /// Removes `sid`'s place among the writers waiting for `name` (one script).
    pub(in super::super) fn leave_rw(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
    ) -> Result<bool> {
        const OP: &str = "leaving a read-write lock's queue";
        let mut keys = vec![b.keys.rw(name.as_str())];
        let args = [sid.to_string(), b.keys.session_prefix()];
        match self {
            Flavor::OneNode(_) => {
                keys.push(b.keys.rw_index(sid));
                let r = b.eval(Role::Other, &scripts().rw_leave, &keys, &args)?;
                Ok(done_has(OP, &r)?.0)
            }
            Flavor::Routed(f) => {
                let stamp = f.rw.stamp(sid, name);
                let r = f.rw.sending_gone(name, Vec::from(args), |args| {
                    b.eval(Role::Other, &scripts().rw_leave, &keys, args)
                })?;
                let (left, has) = done_has(OP, &r)?;
                if !has {
                    f.rw.drop_if(sid, name, stamp);
                }
                Ok(left)
            }
        }
    }
}

/// What the session has left as known here, in whole ms rounded down (never later than
/// the server's end; at least 1: the call is sent only while some is left).
fn known_ms(left: Duration) -> u64 {
    u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Patience in whole ms (zero stays zero: a one-time try).
fn patience_ms(d: Duration) -> u64 {
    if d.is_zero() {
        0
    } else {
        lease_ms(d)
    }
}

fn release_args(b: &Base, sid: &SessionId, mode: RwMode, token: Token) -> [String; 4] {
    [
        sid.to_string(),
        mode.as_str().to_owned(),
        token.get().to_string(),
        b.keys.session_prefix(),
    ]
}

/// `rw_acquire.lua` on `keys`, with `WAIT` after a new term when `wait_replicas` asks for it
/// (a term fewer replicas acknowledged is released and the call fails).
fn rw_call(
    b: &Base,
    sid: &SessionId,
    name: &LeaseName,
    keys: &[String],
    args: &[String],
) -> Result<RwReply> {
    let s = &scripts().rw_acquire;
    let n = b.cfg.wait_replicas;
    if n == 0 {
        return rw_reply(&b.eval(Role::Other, s, keys, args)?);
    }
    let new_term = |r: &Reply| matches!(rw_reply(r), Ok(RwReply::Granted { new: true, .. }));
    let (r, acked) = b
        .scripting
        .eval_then_wait(s, keys, args, &new_term, n, b.wait_timeout())?;
    let r = rw_reply(&r)?;
    match (acked, &r) {
        (Some(acked), RwReply::Granted { token: t, .. }) if acked < n => {
            let mode = if args.get(1).map(String::as_str) == Some("write") {
                RwMode::Write
            } else {
                RwMode::Read
            };
            let released = b
                .eval(
                    Role::Other,
                    &scripts().rw_release,
                    keys,
                    &release_args(b, sid, mode, *t),
                )
                .and_then(|r| Ok(done_has("releasing a read-write lock", &r)?.0));
            Err(b.unacknowledged(name, *t, acked, released))
        }
        _ => Ok(r),
    }
}

impl Routed {
    /// What `sid` has left and its lock-delay in ms, read from its session hash
    /// (`session_ttl.lua`: both are kept, the deadline from `sent`); `SessionExpired` (and
    /// the session forgotten) when it is gone.
    fn session_left(&self, b: &Base, sid: &SessionId, sent: Instant) -> Result<(Duration, u64)> {
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

    /// The release on the lock's node, without a session check (also the undo of a late
    /// grant).
    fn release_rw_term(
        &self,
        b: &Base,
        sid: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        let stamp = self.rw.stamp(sid, name);
        let args = release_args(b, sid, mode, token);
        let r = self.rw.sending_gone(name, Vec::from(args), |args| {
            b.eval(
                Role::Other,
                &scripts().rw_release,
                &[b.keys.rw(name.as_str())],
                args,
            )
        })?;
        let (freed, has) = done_has("releasing a read-write lock", &r)?;
        if !has {
            self.rw.drop_if(sid, name, stamp);
        }
        Ok(freed)
    }
}

/// Decodes `rw_state.lua`'s reply: `{token, writer, its token, {reader, token…}, {waiting…},
/// {session, mode, token, ms left…} of the delayed terms}`.
pub(in super::super) fn rw_state_reply(r: &Reply) -> Result<crate::spi::RwState> {
    const OP: &str = "reading a read-write lock";
    let a = array_of(OP, r, 6)?;
    let last = u64::try_from(int_at(OP, r, 0)?).map_err(|_| bad_reply(OP, r))?;
    let writer = match a[1].as_str().ok_or_else(|| bad_reply(OP, r))? {
        "" => None,
        w => Some((session_in(OP, r, w)?, token(OP, int_at(OP, r, 2)?)?)),
    };
    let flat = a[3].as_array().ok_or_else(|| bad_reply(OP, r))?;
    if flat.len() % 2 != 0 {
        return Err(bad_reply(OP, r));
    }
    let mut readers = flat
        .chunks_exact(2)
        .map(|c| {
            let sid = c[0].as_str().ok_or_else(|| bad_reply(OP, r))?;
            let t = c[1].as_int().ok_or_else(|| bad_reply(OP, r))?;
            Ok((session_in(OP, r, sid)?, token(OP, t)?))
        })
        .collect::<Result<Vec<_>>>()?;
    readers.sort();
    let writers_waiting = a[4]
        .as_array()
        .ok_or_else(|| bad_reply(OP, r))?
        .iter()
        .map(|x| session_in(OP, r, x.as_str().ok_or_else(|| bad_reply(OP, r))?))
        .collect::<Result<Vec<_>>>()?;
    let flat = a[5].as_array().ok_or_else(|| bad_reply(OP, r))?;
    if flat.len() % 4 != 0 {
        return Err(bad_reply(OP, r));
    }
    let mut delayed = flat
        .chunks_exact(4)
        .map(|c| {
            let sid = c[0].as_str().ok_or_else(|| bad_reply(OP, r))?;
            let mode = match c[1].as_str() {
                Some("read") => RwMode::Read,
                Some("write") => RwMode::Write,
                _ => return Err(bad_reply(OP, r)),
            };
            let t = c[2].as_int().ok_or_else(|| bad_reply(OP, r))?;
            let left = c[3].as_int().ok_or_else(|| bad_reply(OP, r))?;
            Ok(RwDelayed {
                session: session_in(OP, r, sid)?,
                mode,
                token: token(OP, t)?,
                remaining: millis(OP, r, left)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    delayed.sort_by(|x, y| x.session.cmp(&y.session));
    Ok(crate::spi::RwState {
        writer,
        readers,
        writers_waiting,
        last_token: last,
        delayed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &str) -> Reply {
        Reply::Data(s.as_bytes().to_vec())
    }

    #[test]
    fn acquire_replies_are_checked_whole() {
        let me = SessionId::random();
        let other = SessionId::random();
        let int = Reply::Int;
        let r = Reply::Array(vec![int(1), int(7), int(900), int(1)]);
        assert!(matches!(
            rw_reply(&r).unwrap(),
            RwReply::Granted { token, remaining, new: true }
                if token.get() == 7 && remaining == Duration::from_millis(900)
        ));
        let r = Reply::Array(vec![int(0), data(other.as_str()), int(2), int(1), int(1)]);
        match rw_reply(&r).unwrap() {
            RwReply::Busy {
                busy:
                    RwAcquire::Busy {
                        writer,
                        readers,
                        writers_waiting,
                    },
                has,
            } => {
                assert_eq!(writer, Some(other.clone()));
                assert_eq!((readers, writers_waiting, has), (2, 1, true));
            }
            _ => panic!("a busy reply"),
        }
        assert!(matches!(
            rw_reply(&Reply::Array(vec![int(-1)])).unwrap(),
            RwReply::Expired
        ));
        // A session holding the write term that asks to read is kept out by itself.
        let r = Reply::Array(vec![int(0), data(me.as_str()), int(0), int(0), int(1)]);
        assert!(matches!(
            rw_reply(&r).unwrap(),
            RwReply::Busy { busy: RwAcquire::Busy { writer: Some(w), .. }, has: true } if w == me
        ));
        for bad in [
            Reply::Array(vec![int(0), data("not a session"), int(0), int(0), int(0)]),
            Reply::Array(vec![int(0), data(""), int(-1), int(0), int(0)]),
            Reply::Array(vec![int(0), data(""), int(0), int(0), int(2)]),
            Reply::Array(vec![int(1), int(0), int(900), int(1)]),
            Reply::Array(vec![int(1), int(3), int(-5), int(1)]),
            Reply::Array(vec![int(1), int(3), int(5)]),
            Reply::Nil,
        ] {
            assert!(rw_reply(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn state_replies_sort_readers_and_delayed_terms_and_keep_the_queue_order() {
        let (a, b, w) = (
            SessionId::random(),
            SessionId::random(),
            SessionId::random(),
        );
        let (first, second) = if a < b { (a, b) } else { (b, a) };
        let int = Reply::Int;
        let arr = Reply::Array;
        let r = arr(vec![
            int(9),
            data(""),
            int(0),
            arr(vec![
                data(second.as_str()),
                int(8),
                data(first.as_str()),
                int(9),
            ]),
            arr(vec![data(w.as_str())]),
            arr(vec![
                data(second.as_str()),
                data("write"),
                int(5),
                int(1500),
                data(first.as_str()),
                data("read"),
                int(4),
                int(0),
            ]),
        ]);
        let st = rw_state_reply(&r).unwrap();
        assert_eq!(st.writer, None);
        assert_eq!(st.last_token, 9);
        let tok = |t| Token::new(t).unwrap();
        assert_eq!(
            st.readers,
            vec![(first.clone(), tok(9)), (second.clone(), tok(8))]
        );
        assert_eq!(st.writers_waiting, vec![w.clone()]);
        assert_eq!(
            st.delayed,
            vec![
                RwDelayed {
                    session: first,
                    mode: RwMode::Read,
                    token: tok(4),
                    remaining: Duration::ZERO,
                },
                RwDelayed {
                    session: second,
                    mode: RwMode::Write,
                    token: tok(5),
                    remaining: Duration::from_millis(1500),
                },
            ]
        );
        let empty = || arr(vec![]);
        let r = arr(vec![
            int(3),
            data(w.as_str()),
            int(3),
            empty(),
            empty(),
            empty(),
        ]);
        assert_eq!(
            rw_state_reply(&r).unwrap().writer,
            Some((w.clone(), tok(3)))
        );
        let delayed = |d: Vec<Reply>| arr(vec![int(3), data(""), int(0), empty(), empty(), arr(d)]);
        for bad in [
            arr(vec![
                int(3),
                data(""),
                int(0),
                arr(vec![data("x")]),
                empty(),
                empty(),
            ]),
            arr(vec![int(3), data(""), int(0), empty(), empty()]),
            delayed(vec![data(w.as_str()), data("write"), int(3)]),
            delayed(vec![data(w.as_str()), data("both"), int(3), int(10)]),
            delayed(vec![data(w.as_str()), data("read"), int(0), int(10)]),
            delayed(vec![data(w.as_str()), data("read"), int(3), int(-1)]),
            delayed(vec![data("x"), data("read"), int(3), int(10)]),
        ] {
            assert!(rw_state_reply(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn known_names_are_dropped_only_if_not_noted_since() {
        let k = RwKnown::default();
        let s = SessionId::random();
        let n = LeaseName::new("n").unwrap();
        let now = Instant::now();
        assert_eq!(k.left(&s, now), None, "an unknown session");
        k.renewed(
            &s,
            now + Duration::from_secs(5),
            Some(Duration::from_secs(9)),
        );
        k.renewed(&s, now + Duration::from_secs(1), None);
        let (left, lease, delay) = k.left(&s, now).unwrap();
        assert_eq!(delay, None, "no lock-delay known yet");
        assert!(left > Duration::from_secs(4), "kept the later");
        assert_eq!(lease, Some(Duration::from_secs(9)));
        assert_eq!(k.left(&s, now + Duration::from_secs(6)), None, "passed");
        k.note(&s, &n);
        let seen = k.stamp(&s, &n);
        assert!(k.note(&s, &n) > seen.unwrap()); // an acquire found it held since
        k.drop_if(&s, &n, seen);
        assert_eq!(k.names(&s).len(), 1, "noted since: kept");
        k.drop_if(&s, &n, k.stamp(&s, &n));
        assert!(k.names(&s).is_empty());
        k.note(&s, &n);
        assert_eq!(k.forget(&s), vec![n.clone()]);
        assert!(k.names(&s).is_empty() && k.left(&s, now).is_none());
        assert!(k.gone_for(&n).is_empty(), "closed: nothing to send");
    }

    #[test]
    fn sessions_found_expired_are_sent_with_their_names_until_a_script_ended_them() {
        let k = RwKnown::default();
        let (s, t) = (SessionId::random(), SessionId::random());
        let (n, m) = (LeaseName::new("n").unwrap(), LeaseName::new("m").unwrap());
        k.note(&s, &n);
        k.note(&s, &m);
        k.note(&t, &n);
        k.expired(&s);
        k.expired(&t);
        assert!(k.names(&s).is_empty(), "forgotten");
        let mut on_n = k.gone_for(&n);
        on_n.sort();
        let mut both = vec![s.to_string(), t.to_string()];
        both.sort();
        assert_eq!(on_n, both);
        assert_eq!(k.gone_for(&m), vec![s.to_string()]);
        k.gone_ended(&n, &[s.to_string()]);
        assert_eq!(k.gone_for(&n), vec![t.to_string()]);
        k.gone_ended(&n, &[t.to_string()]);
        assert!(k.gone_for(&n).is_empty());
        assert_eq!(k.gone_for(&m), vec![s.to_string()], "another name still");
        k.expired(&SessionId::random()); // unknown: nothing
    }
}
